"""Chunk stores: a partitioned graph on disk, its format, its conversion, and reading it inside TensorFlow.

    store.py     the format (manifest, layout, Store, open_store, VertexArray)
    npy.py       the npy backend: one .npy file per array
    hdf5.py      the HDF5 backend (read through tensorflow-io)
    integrity.py checksums, atomic writes, verified-file cache
    reader.py    StoreReader: a chunk or an interval's rows as ops with tensor indices (compiled loops)
    convert.py   write_store, and streaming conversion of edge lists, npz, HDF5 features and presets
                 (tools/partition_graph.py)
    sources.py, prepare.py, presets.py   what conversion reads, how it prepares graphs, synthetic presets
    memory.py    sizes: a chunk's bytes, the smallest P for a budget, parsing and printing byte counts

Nothing here runs a model: ngra_tf.runtime reads stores through StoreReader.
"""

from ngra_tf.store.convert import write_store
from ngra_tf.store.store import Store, StoreError, StorePartition, VertexArray, open_store

__all__ = ["Store", "StoreError", "StorePartition", "VertexArray", "open_store", "write_store"]
