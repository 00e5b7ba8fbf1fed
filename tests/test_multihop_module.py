"""MultiHopAttention (pure torch) against a literal transcription of Iida et al. (2019)."""
import pytest
import torch

from fairseq_ctx.modules.multihop_attention import MultiHopAttention

QUERY_DIM, SOURCE_DIM, OUTPUT_DIM = 6, 5, 7


def reference_multihop(query, source_hids, padding_mask, W_a, W_o, hops, hop_mode):
    """Eq. 1-9, 16 and 19 written per sentence and per head, matrices on column vectors.

    W_a[k]: (D, query_dim); W_o: (output_dim, query_dim + N*D) acting on [d; c'_1..c'_N];
    hops[j]: {"U_c": [..]} plus, when dependent, {"W_b", "U_b": [..], "v_b"}.
    """
    outs = []
    for b in range(query.size(0)):
        d = query[b]
        H = source_hids[:, b]
        if padding_mask is not None:
            H = H[~padding_mask[:, b]]  # attention only over real tokens
        N = len(W_a)
        s = [W_a[k] @ d for k in range(N)]  # Eq. 1
        c = [torch.softmax(s[k] @ H.T, dim=0) @ H for k in range(N)]  # Eq. 2
        for hop in hops:
            if hop_mode == "dependent":
                e = torch.stack(
                    [hop["v_b"] @ torch.tanh(hop["W_b"] @ s[k] + hop["U_b"][k] @ c[k]) for k in range(N)]
                )  # Eq. 7
                beta = torch.exp(e) / torch.exp(e).sum()  # Eq. 8 (with e^(k) in the numerator)
                c = [beta[k] * (hop["U_c"][k] @ c[k]) for k in range(N)]  # Eq. 9
            else:
                c = [hop["U_c"][k] @ c[k] for k in range(N)]  # Eq. 19
        outs.append(torch.tanh(W_o @ torch.cat([d] + c)))  # Eq. 16
    return torch.stack(outs)


def paper_weights(module: MultiHopAttention):
    """Read the module's parameters back into the paper's per-head matrices."""
    D, N = module.source_dim, module.num_heads
    W_a = [module.input_proj.weight[k * D : (k + 1) * D] for k in range(N)]
    W = module.output_proj.weight  # module input order is [c'_1..c'_N; d]
    W_o = torch.cat([W[:, N * D :], W[:, : N * D]], dim=1)  # -> paper order [d; c'_1..c'_N]
    hops = []
    for hop in module.hops:
        if module.hop_mode == "dependent":
            hops.append(
                {
                    "W_b": hop.query_proj.weight,
                    "U_b": [hop.context_proj[k][:, :D].T for k in range(N)],
                    "U_c": [hop.context_proj[k][:, D:].T for k in range(N)],
                    "v_b": hop.score_vector,
                }
            )
        else:
            hops.append({"U_c": [hop.context_proj[k].T for k in range(N)]})
    return W_a, W_o, hops


def random_batch(bsz=3, srclen=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(bsz, QUERY_DIM, generator=g)
    source = torch.randn(srclen, bsz, SOURCE_DIM, generator=g)
    mask = torch.zeros(srclen, bsz, dtype=torch.bool)
    mask[-1, 1] = True  # right padding as fairseq's LSTM encoder returns it
    mask[-2:, 2] = True
    return query, source, mask


@pytest.mark.parametrize(
    "heads,hops,mode,learned",
    [
        (1, 1, "dependent", False),
        (2, 1, "dependent", False),
        (2, 2, "dependent", False),
        (3, 3, "dependent", False),
        (2, 3, "independent", False),
        (2, 2, "dependent", True),
    ],
)
def test_module_matches_reference_equations(heads, hops, mode, learned):
    torch.manual_seed(heads * 10 + hops)
    module = MultiHopAttention(QUERY_DIM, SOURCE_DIM, OUTPUT_DIM, heads, hops, mode, learned)
    # larger weights than the init so that the head softmax (Eq. 8) is far from uniform
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(5)
    query, source, mask = random_batch()
    out, attn = module(query, source, mask)
    W_a, W_o, hop_weights = paper_weights(module)
    expected = reference_multihop(query, source, mask, W_a, W_o, hop_weights, mode)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert attn.shape == (source.size(0), query.size(0))
    torch.testing.assert_close(attn.sum(0), torch.ones(query.size(0)))
    assert (attn[mask] == 0).all()


def test_dependent_hop_weights_heads_by_softmax_over_heads():
    torch.manual_seed(0)
    module = MultiHopAttention(QUERY_DIM, SOURCE_DIM, OUTPUT_DIM, 3, 2, "dependent")
    query, source, mask = random_batch()
    queries = module.input_proj(query).view(3, 3, SOURCE_DIM)
    contexts = torch.randn(3, 3, SOURCE_DIM)
    new_contexts, beta = module.hops[0](queries, contexts)
    assert beta.shape == (3, 3, 1)
    torch.testing.assert_close(beta.sum(1), torch.ones(3, 1))
    # c' = beta * U_c c
    U_c = module.hops[0].context_proj[..., SOURCE_DIM:]
    unscaled = torch.einsum("bnd,nde->bne", contexts, U_c)
    torch.testing.assert_close(new_contexts, beta * unscaled)


def test_parameter_count_per_extra_hop():
    D, N = SOURCE_DIM, 3
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    base = count(MultiHopAttention(QUERY_DIM, D, OUTPUT_DIM, N, 1))
    dep2 = count(MultiHopAttention(QUERY_DIM, D, OUTPUT_DIM, N, 2, "dependent"))
    dep3 = count(MultiHopAttention(QUERY_DIM, D, OUTPUT_DIM, N, 3, "dependent"))
    ind2 = count(MultiHopAttention(QUERY_DIM, D, OUTPUT_DIM, N, 2, "independent"))
    learned = count(MultiHopAttention(QUERY_DIM, D, OUTPUT_DIM, N, 2, "dependent", True))
    assert base == N * D * QUERY_DIM + OUTPUT_DIM * (N * D + QUERY_DIM)
    assert dep2 - base == (2 * N + 1) * D * D
    assert dep3 - dep2 == (2 * N + 1) * D * D
    assert ind2 - base == N * D * D
    assert learned - dep2 == D


@pytest.mark.parametrize("heads,hops,mode", [(1, 1, "dependent"), (2, 1, "dependent"), (2, 2, "dependent"), (2, 3, "independent")])
def test_padding_positions_do_not_change_output(heads, hops, mode):
    torch.manual_seed(1)
    module = MultiHopAttention(QUERY_DIM, SOURCE_DIM, OUTPUT_DIM, heads, hops, mode)
    query, source, mask = random_batch()
    out, _ = module(query, source, mask)
    garbage = source.clone()
    garbage[mask] = 1e4
    out_garbage, _ = module(query, garbage, mask)
    torch.testing.assert_close(out, out_garbage)


@pytest.mark.parametrize("bad", [dict(num_heads=0), dict(num_hops=0), dict(hop_mode="both")])
def test_bad_options_raise_one_clear_error(bad):
    kwargs = dict(query_dim=4, source_dim=4, output_dim=4)
    kwargs.update(bad)
    option = {"num_heads": "--attention-heads", "num_hops": "--attention-hops", "hop_mode": "--hop-mode"}[next(iter(bad))]
    with pytest.raises(ValueError, match=option):
        MultiHopAttention(**kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_outputs_finite_with_large_scores(dtype):
    torch.manual_seed(2)
    module = MultiHopAttention(QUERY_DIM, SOURCE_DIM, OUTPUT_DIM, 2, 3, "dependent")
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(50)  # scores far beyond fp16's exp range: softmaxes must run in fp32
    query, source, mask = random_batch()
    module = module.to(dtype)
    source = source.to(dtype)
    out, attn = module(query.to(dtype), source, mask)
    assert out.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(attn).all()
