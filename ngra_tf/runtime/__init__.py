"""Running models: one executor for every mode, over an in-memory partition or a store, one device or several.

    stages.py      Stage: a graph layer with the per-vertex layers before it
    sources.py     MemorySource, StoreSource: where the rows and chunks come from
    executor.py    Executor: a model's stages forward and backward as one custom gradient
    schedule.py    the step tables: which chunk steps a layer runs, in which order (NGra's schedules)
    loops.py       ChunkLoops: a layer's chunk steps as compiled loops, column by column
    ring_loops.py  RingLoops: the same over several devices, rows shared along the placement's routes
    blocks.py      Blocks: arrays of interval blocks on the device, in host memory or on disk
    chunks.py      PackedChunks: an in-memory partition's chunks as tensors a loop slices
    budget.py      Plan: the working-set estimate of a store-backed model, from the executor's steps
    resident.py    what a budget is checked against: the process's measured peak memory
    faults.py      the errors a store-backed run ends with: a spill directory full or failing, a store changed
"""

from ngra_tf.runtime.executor import Executor
from ngra_tf.runtime.sources import MemorySource, StoreSource
from ngra_tf.runtime.stages import Stage, stages_of

__all__ = ["Executor", "MemorySource", "Stage", "StoreSource", "stages_of"]
