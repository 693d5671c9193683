"""Deterministic synthetic graphs: uniform random and power-law (Chung-Lu style)."""

from __future__ import annotations

import concurrent.futures

import numpy as np

from ngra_tf.graph.graph import Graph


def _check_sizes(num_vertices, num_edges):
    if num_vertices < 0 or num_edges < 0:
        raise ValueError(f"num_vertices and num_edges must be >= 0, got {num_vertices} and {num_edges}")
    if num_edges and not num_vertices:
        raise ValueError("a graph with edges needs vertices")


def uniform_graph(num_vertices: int, num_edges: int, seed: int = 0, unique: bool = True) -> Graph:
    """Edges drawn uniformly at random (without repeats when `unique`)."""
    _check_sizes(num_vertices, num_edges)
    rng = np.random.default_rng(seed)
    cells = num_vertices * num_vertices
    if unique:
        if num_edges > cells:
            raise ValueError(f"cannot draw {num_edges} distinct edges among {num_vertices} vertices")
        found = np.unique(rng.integers(0, cells, num_edges, dtype=np.int64))
        while found.size < num_edges:  # top up after collisions
            extra = rng.integers(0, cells, num_edges - found.size, dtype=np.int64)
            found = np.unique(np.concatenate([found, extra]))
        ids = rng.permutation(found)[:num_edges]
    else:
        ids = rng.integers(0, cells, num_edges, dtype=np.int64)
    src, dst = np.divmod(ids, max(num_vertices, 1))
    return Graph.from_edges(src, dst, num_vertices)


def power_law_graph(num_vertices: int, num_edges: int, exponent: float = 2.2, seed: int = 0) -> Graph:
    """A graph whose in- and out-degrees follow a power law with the given exponent.

    Both endpoints of each edge are drawn with probability proportional to
    rank^(-1/(exponent-1)) (Chung-Lu), then vertex ids are shuffled so that
    degree does not follow id. Multi-edges can occur, as in real graphs.
    """
    src, dst = next(power_law_edges(num_vertices, num_edges, exponent, seed, block_edges=max(1, num_edges)))
    return Graph.from_edges(src, dst, num_vertices)


def _search_in_order(boundaries: np.ndarray, values: np.ndarray) -> np.ndarray:
    """np.searchsorted(boundaries, values) for values in [0, 1), searched in increasing order.

    numpy starts each search where the last one ended when the values rise,
    so a large boundary array is walked in cache instead of jumped through:
    several times faster. The values are visited by their top bits (then
    position), packed with their position into one sortable uint64; each
    result is still its own value's, so the output is searchsorted's.
    """
    count = len(values)
    position_bits = max(1, (count - 1).bit_length())
    keys = (values * float(1 << (64 - position_bits))).astype(np.uint64)  # (values < 1: fits)
    keys <<= np.uint64(position_bits)
    keys |= np.arange(count, dtype=np.uint64)
    keys.sort()
    order = (keys & np.uint64((1 << position_bits) - 1)).astype(np.intp)
    found = np.empty(count, np.intp)
    found[order] = np.searchsorted(boundaries, values[order])
    return found


def power_law_edges(num_vertices: int, num_edges: int, exponent: float = 2.2, seed: int = 0,
                    block_edges: int = 1 << 20):
    """Yields power_law_graph's edges in order as (src, dst) blocks of up to block_edges.

    All sources are drawn before all destinations from one generator; two
    copies of it, the second advanced past the sources' draws (one 64-bit
    step per double), give the same numbers block by block, so a graph too
    big to hold is streamed exactly as power_law_graph would build it. The
    two generators are independent, so a block's sources and destinations
    are drawn on two threads (numpy's draws and searchsorted release the GIL).
    """
    _check_sizes(num_vertices, num_edges)
    if exponent <= 1:
        raise ValueError(f"exponent must be > 1, got {exponent}")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, num_vertices + 1, dtype=np.float64) ** (-1.0 / (exponent - 1.0))
    cumulative = np.cumsum(weights)
    cumulative /= cumulative[-1] if num_vertices else 1.0
    relabel = rng.permutation(num_vertices)
    src_draws = rng
    dst_bits = np.random.PCG64()
    dst_bits.state = rng.bit_generator.state
    dst_bits.advance(num_edges)
    dst_draws = np.random.Generator(dst_bits)

    def draw(generator, count):
        return relabel[np.minimum(_search_in_order(cumulative, generator.random(count)), num_vertices - 1)]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for start in range(0, max(num_edges, 1), block_edges):  # an edgeless graph is one empty block
            count = min(block_edges, num_edges - start)
            dst = pool.submit(draw, dst_draws, count)
            yield draw(src_draws, count), dst.result()
