"""ngra_tf's layers against PyTorch Geometric's, on Cora (2708 x 1433, float32).

Each case builds the ngra_tf layer, randomises its weights, copies them into
the PyG module (torch's Linear holds W transposed), runs both over the same
graph (PyG's edge_index[0] is the source: messages flow edge_index[0] ->
edge_index[1], as ngra_tf's src -> dst), and compares the outputs and the
gradients of sum(out * c), c one random upstream gradient, with respect to
the input features and every weight. Skipped unless torch and
torch_geometric are installed (`pip install .[bench]`); run alone with
`pytest -m pyg`. Run with -s to see the differences.
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_checks as lc
import ngra_tf
from ngra_tf import layers, recipes

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
from torch_geometric.nn import APPNP, GATConv, GCNConv, GINConv, SAGEConv  # noqa: E402
from torch_geometric.nn.conv.gcn_conv import gcn_norm  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "compiler"))
import compiler_checks as cc  # noqa: E402  (assert_close: relative to the largest magnitude)

pytestmark = pytest.mark.pyg

RTOL = 1e-4  # float32 through different summation orders; relative to each array's largest magnitude
UNITS = 16


def transposed(array):
    return array.T


def same(array):
    return array


@pytest.fixture(scope="module")
def cora():
    dataset = ngra_tf.datasets.cora()
    symmetric = dataset.graph.symmetrize().remove_self_loops()
    x = dataset.dense_features()  # 0/1 bag of words
    cotangent_rng = np.random.default_rng(5)
    return dataset, symmetric, x, cotangent_rng


def edge_index(graph):
    """The graph's edges as PyG's edge_index: row 0 the sources, row 1 the destinations."""
    return torch.from_numpy(np.stack([graph.src, graph.dst]).astype(np.int64))


def compare(what, ngra_fn, variables, torch_fn, parameters, x, rng, tie_groups=None):
    """ngra_fn(x) (variables: ngra_tf weights) against torch_fn(x) (parameters: the matching torch
    tensors, each with the layout map from ngra_tf's array to torch's): the weights are copied over,
    then outputs and gradients compared in torch's layout. Returns the largest differences.

    tie_groups (a group id per vertex) compares d/dx summed over each group instead of per row: see
    test_graphsage_is_sageconv."""
    with torch.no_grad():
        for variable, (parameter, layout) in zip(variables, parameters):
            parameter.copy_(torch.from_numpy(np.ascontiguousarray(layout(variable.numpy()))))
    x_tf = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x_tf)
        out = ngra_fn(x_tf)
        cotangent = rng.normal(size=out.shape).astype(np.float32)
        loss = tf.reduce_sum(out * cotangent)
    ours = [out.numpy()] + [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, [x_tf] + variables)]
    ours = ours[:2] + [layout(g) for g, (_, layout) in zip(ours[2:], parameters)]

    x_torch = torch.from_numpy(x).requires_grad_(True)
    out_torch = torch_fn(x_torch)
    (out_torch * torch.from_numpy(cotangent)).sum().backward()
    theirs = [out_torch.detach().numpy(), x_torch.grad.numpy()] + [p.grad.numpy() for p, _ in parameters]

    names = ["output", "d/dx"] + [f"d/d{v.path}" for v in variables]
    report = {}
    if tie_groups is not None:
        ungrouped = float(np.abs(ours[1] - theirs[1]).max())
        report["d/dx per row"] = (ungrouped, ungrouped / float(np.abs(theirs[1]).max()))
        ours[1], theirs[1] = (group_sums(g, tie_groups) for g in (ours[1], theirs[1]))
        names[1] = "d/dx summed over tie groups"
    for name, got, want in zip(names, ours, theirs):
        assert got.shape == want.shape, (what, name, got.shape, want.shape)
        assert np.any(want != 0), f"{what}: {name} is all zero"
        diff = float(np.abs(got - want).max())
        report[name] = (diff, diff / float(np.abs(want).max()))
        cc.assert_close(got, want, f"{what}: {name}", rtol=RTOL)
    print(f"\n{what}: " + ", ".join(f"{name} max |diff| {a:.2e} ({r:.2e} of max)" for name, (a, r) in report.items()))
    return report


def group_sums(rows, groups):
    sums = np.zeros((groups.max() + 1,) + rows.shape[1:], np.float64)
    np.add.at(sums, groups, rows)
    return sums


def built(layer, x, graph, scale=0.1):
    layer(tf.constant(x), graph=graph)
    lc.randomize_weights(layer, seed=11, scale=scale)
    return layer


@pytest.mark.parametrize("aggregator, root_weight, normalize", [
    ("mean", True, False), ("mean", False, True), ("max", True, False), ("max", True, True)])
def test_graphsage_is_sageconv(cora, aggregator, root_weight, normalize):
    dataset, graph, x, rng = cora
    layer = built(layers.GraphSAGE(UNITS, aggregator=aggregator, root_weight=root_weight, normalize=normalize),
                  x, graph)
    conv = SAGEConv(dataset.num_features, UNITS, aggr=aggregator, project=aggregator == "max",
                    root_weight=root_weight, normalize=normalize)
    pairs = [(layer.dense.kernel, conv.lin_l.weight, transposed), (layer.dense.bias, conv.lin_l.bias, same)]
    if root_weight:
        pairs.append((layer.root.kernel, conv.lin_r.weight, transposed))
    if aggregator == "max":
        pairs += [(layer.project.kernel, conv.lin.weight, transposed), (layer.project.bias, conv.lin.bias, same)]
    assert len(pairs) == len(layer.trainable_weights) == len(list(conv.parameters()))
    variables, parameters = [v for v, _, _ in pairs], [(p, f) for _, p, f in pairs]
    # Cora has vertices with identical feature rows (2708 rows, 2692 distinct), so a destination's max can
    # tie between two in-neighbours (35 destinations have such pairs). torch's scatter max sends the gradient
    # to all tied entries, split equally; ngra_tf's to one winning edge. Both are subgradients; they agree on
    # the output and the weights' gradients, and on d/dx summed over each group of identical rows.
    groups = np.unique(x, axis=0, return_inverse=True)[1].ravel() if aggregator == "max" else None
    index = edge_index(graph)
    compare(f"SAGEConv(aggr={aggregator}, root_weight={root_weight}, normalize={normalize})",
            lambda t: layer(t, graph=graph), variables, lambda t: conv(t, index), parameters, x, rng, groups)


def test_gin_is_ginconv(cora):
    dataset, graph, x, rng = cora
    layer = built(layers.GIN(UNITS, hidden=32, eps=0.1, train_eps=True), x, graph)
    mlp = torch.nn.Sequential(torch.nn.Linear(dataset.num_features, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, UNITS))
    conv = GINConv(mlp, eps=0.1, train_eps=True)
    first, last = layer.mlp
    pairs = [(first.kernel, mlp[0].weight, transposed), (first.bias, mlp[0].bias, same),
             (last.kernel, mlp[2].weight, transposed), (last.bias, mlp[2].bias, same),
             (layer.eps_weight, conv.eps, lambda a: np.reshape(a, (1,)))]
    assert len(pairs) == len(layer.trainable_weights) == len(list(conv.parameters()))
    variables, parameters = [v for v, _, _ in pairs], [(p, f) for _, p, f in pairs]
    index = edge_index(graph)
    compare("GINConv(train_eps=True, 2 Linear + ReLU)", lambda t: layer(t, graph=graph), variables,
            lambda t: conv(t, index), parameters, x, rng)


def test_gcn_norm_is_pygs(cora):
    """recipes.prepare_graph("gcn") = symmetrise, drop loops, add one loop per vertex, Graph.gcn_norm:
    the same edges and weights as PyG's gcn_norm (add_remaining_self_loops, degree at the target)."""
    dataset, graph, _, _ = cora
    prepared = recipes.prepare_graph("gcn", dataset.graph)
    index, weight = gcn_norm(edge_index(graph), None, num_nodes=graph.num_vertices, add_self_loops=True)
    index, weight = index.numpy(), weight.numpy()
    n = graph.num_vertices
    theirs = np.argsort(index[1] * n + index[0])
    ours = np.argsort(prepared.dst.astype(np.int64) * n + prepared.src)
    np.testing.assert_array_equal(index[0][theirs], prepared.src[ours])
    np.testing.assert_array_equal(index[1][theirs], prepared.dst[ours])
    np.testing.assert_allclose(prepared.edge_data[ours], weight[theirs], rtol=1e-6)


def test_gcn_is_gcnconv(cora):
    dataset, graph, x, rng = cora
    prepared = recipes.prepare_graph("gcn", dataset.graph)
    layer = built(layers.GCN(UNITS), x, prepared)
    conv = GCNConv(dataset.num_features, UNITS)
    pairs = [(layer.dense.kernel, conv.lin.weight, transposed), (layer.dense.bias, conv.bias, same)]
    assert len(list(conv.parameters())) == len(pairs)
    index = edge_index(graph)  # without self loops: GCNConv adds them, and normalises
    compare("GCNConv", lambda t: layer(t, graph=prepared), [v for v, _, _ in pairs],
            lambda t: conv(t, index), [(p, f) for _, p, f in pairs], x, rng)


def test_appnp_chain_is_appnp(cora):
    """APPNP(K=10, alpha=0.1) against K GCNPropagate + Rescaling + Add steps (no weights: d/dx only)."""
    dataset, graph, x, rng = cora
    prepared = recipes.prepare_graph("gcn", dataset.graph)
    k, alpha = 10, 0.1
    propagate = layers.GCNPropagate()
    keep, restart = keras.layers.Rescaling(1 - alpha), keras.layers.Rescaling(alpha)
    add = keras.layers.Add()

    def chain(h):
        z = h
        for _ in range(k):
            z = add([keep(propagate(z, graph=prepared)), restart(h)])
        return z

    appnp = APPNP(K=k, alpha=alpha)
    index = edge_index(graph)  # APPNP adds the self loops and normalises (gcn_norm)
    compare("APPNP(K=10, alpha=0.1)", chain, [], lambda t: appnp(t, index), [], x, rng)


@pytest.mark.parametrize("heads, concat", [(8, True), (3, False)])
def test_gat_is_gatconv(cora, heads, concat):
    dataset, symmetric, x, rng = cora
    graph = symmetric.add_self_loops()
    units = 8
    layer = built(layers.GAT(units, heads=heads, concat_heads=concat), x, graph, scale=0.05)
    conv = GATConv(dataset.num_features, units, heads=heads, concat=concat, add_self_loops=False)
    pairs = [(layer.kernel, conv.lin.weight, transposed),
             (layer.attention_src, conv.att_src, lambda a: a[None]),
             (layer.attention_dst, conv.att_dst, lambda a: a[None]),
             (layer.bias, conv.bias, same)]
    assert len(pairs) == len(layer.trainable_weights) == len(list(conv.parameters()))
    index = edge_index(graph)  # the loops are in the graph: GATConv must not add its own
    compare(f"GATConv(heads={heads}, concat={concat})", lambda t: layer(t, graph=graph), [v for v, _, _ in pairs],
            lambda t: conv(t, index), [(p, f) for _, p, f in pairs], x, rng)


def test_rgcn_is_rgcnconv(cora):
    from torch_geometric.nn import RGCNConv  # noqa: PLC0415

    dataset, _, x, rng = cora
    graph = recipes.prepare_graph("rgcn", dataset.graph)  # GG-NN's three directions as relations
    relations = graph.edge_data[:, 0].astype(np.int64)
    layer = built(layers.RGCN(UNITS, num_relations=3), x, graph, scale=0.05)
    conv = RGCNConv(dataset.num_features, UNITS, num_relations=3, aggr="mean")
    pairs = [(layer.relation_kernels, conv.weight, same), (layer.dense.kernel, conv.root, same),
             (layer.dense.bias, conv.bias, same)]
    assert len(pairs) == len(layer.trainable_weights) == len(list(conv.parameters()))
    assert "fused: yes, edge code" in layer.explain()
    index, types = edge_index(graph), torch.from_numpy(relations)
    compare("RGCNConv(num_relations=3, aggr=mean)", lambda t: layer(t, graph=graph), [v for v, _, _ in pairs],
            lambda t: conv(t, index, types), [(p, f) for _, p, f in pairs], x, rng)
