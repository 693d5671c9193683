"""Running models: one executor for every mode, over an in-memory partition or a store, one device or several.

    executor.py    Executor: a model's stages forward and backward as one custom gradient
    residency.py   InMemory | Streamed: where rows, chunks and kept values live (chosen once)
    lanes.py       OneDevice | Ring: which devices run the steps, who forwards rows to whom (chosen once)
    whole.py       WholeStage: a graph layer on all rows (in memory, one device)
    blocked.py     BlockedStage: a stage over interval blocks (a store, or several devices)
    shared.py      SharedFunctions: each stage's forward and backward traced once per signature
    stages.py      Stage: a graph layer with the per-vertex layers before it
    schedule.py    the step tables: which chunk steps a layer runs, in which order (NGra's schedules)
    loops.py       ChunkLoops: a layer's chunk steps as compiled loops, column by column
    ring_loops.py  RingLoops: the same over several devices, rows shared along the placement's routes
    blocks.py      Blocks: arrays of interval blocks on the device, in host memory or on disk
    chunks.py      PackedChunks: an in-memory partition's chunks as tensors a loop slices
    spill.py       SpillDirectory: the disk host tier's files, from the first step to the end of a run
    budget.py      Plan: the working-set estimate of a store-backed model
    resident.py    what a budget is checked against: the process's measured peak memory
    faults.py      the errors a store-backed run ends with: a spill directory full or failing, a store changed
"""

from ngra_tf.runtime.executor import Executor
from ngra_tf.runtime.residency import InMemory, Streamed
from ngra_tf.runtime.stages import Stage, stages_of

__all__ = ["Executor", "InMemory", "Stage", "Streamed", "stages_of"]
