"""Re-run the hand mutations the end-to-end equation tests were checked against.

    python tests/equation_mutations.py [sentential|context_aware|cross_agg|multihop ...]

For each mutation: apply its edits to the model code, run the family's
tests/test_<family>_equations_end_to_end.py (or the test a mutation names: attention dropout,
which the equation tests switch off), restore the files (always, in a
``finally``), and print CAUGHT (an equation assertion failed), CRASHED (the mutated code
only raised: not evidence that the tests check the equation) or MISSED. Run it on a clean
checkout: it rewrites fairseq_ctx/ files while a mutation's tests run. Not a pytest
module: it imports torch and fairseq once and runs each mutation's tests with pytest in a
process forked from it (the mutated model code imported there afresh; under a second each);
tests/test_equation_mutations_are_caught.py runs it on a copy of the checkout in CI.
"""
import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENTIAL = "fairseq_ctx/models/transformer_sentential.py"
CONTEXT_AWARE = "fairseq_ctx/models/transformer_context_aware.py"
CONTEXT_AWARE_MODULE = "fairseq_ctx/modules/context_aware_attention.py"
CROSS_AGG = "fairseq_ctx/models/transformer_cross_agg.py"
MULTIHOP_MODULE = "fairseq_ctx/modules/multihop_attention.py"
MULTIHOP_MODEL = "fairseq_ctx/models/lstm_multihop.py"

# family -> (test file, [(mutation, [(file, old text, new text), ...][, test to run instead]), ...])
MUTATIONS = {
    "sentential": (
        "tests/test_sentential_equations_end_to_end.py",
        [
            (
                '(a) FFN_l applied after the decoder layer instead of before',
                [
                    (SENTENTIAL, 'return super().forward(self.fuse_sentential_context(x), *args, **kwargs)  # Eq. 1',
                     'out = super().forward(x, *args, **kwargs)\n        return (self.fuse_sentential_context(out[0]),) + tuple(out[1:])'),
                ],
            ),
            (
                '(b) deep context over H^0..H^{L-1}',
                [
                    (SENTENTIAL, 'layer_states = states[1:-1] + encoder_out["encoder_out"]',
                     'layer_states = states[:-1]'),
                ],
            ),
            (
                '(c) g0 from H^1 instead of H^0',
                [
                    (SENTENTIAL, 'g0_states = states[0]  # H^0 after the embedding dropout',
                     'g0_states = states[1]  # H^0 after the embedding dropout'),
                ],
            ),
            (
                '(d) no residual around FFN_l',
                [
                    (SENTENTIAL, '        x = self.residual_connection(x, residual)\n        if not self.normalize_before:\n            x = self.sentential_layer_norm(x)',
                     '        if not self.normalize_before:\n            x = self.sentential_layer_norm(x)'),
                ],
            ),
            (
                "(e) every decoder layer reads layer 1's W1_g g + b1",
                [
                    (SENTENTIAL, 'sentence_bias=context[f"sentence_bias_{i}"]',
                     'sentence_bias=context["sentence_bias_0"]'),
                ],
            ),
            (
                '(f) TAM queried by the raw layer input in pre-norm (before the LayerNorm)',
                [
                    (SENTENTIAL, 'g = context.transparent_attention(x, *context.layer_projections)',
                     'g = context.transparent_attention(residual, *context.layer_projections)'),
                ],
            ),
            (
                "(g) H^L taken before the encoder's final LayerNorm (pre-norm)",
                [
                    (SENTENTIAL, 'layer_states = states[1:-1] + encoder_out["encoder_out"]',
                     'layer_states = states[1:]'),
                ],
            ),
            (
                "(h) TAM built with the encoder's head count (unequal sides)",
                [
                    (SENTENTIAL, '                    cfg.decoder.attention_heads,\n',
                     '                    cfg.encoder.attention_heads,\n'),
                ],
            ),
            (
                "(i) the attentive pooling built with the decoder's head count (unequal sides)",
                [
                    (SENTENTIAL, '                cfg.encoder.attention_heads,\n',
                     '                cfg.decoder.attention_heads,\n'),
                ],
            ),
            (
                "(j) FFN_l as wide as the encoder's FFN (unequal sides)",
                [
                    (SENTENTIAL, '                cfg.decoder.ffn_embed_dim,\n',
                     '                cfg.encoder.ffn_embed_dim,\n'),
                ],
            ),
            (
                "(k) FFN_l's g block sized by the decoder's width (a decoder wider than the encoder)",
                [
                    (SENTENTIAL, '                self.embed_dim,\n                cfg.encoder.embed_dim,\n',
                     '                self.embed_dim,\n                cfg.decoder.embed_dim,\n'),
                ],
            ),
        ],
    ),
    "context_aware": (
        "tests/test_context_aware_equations_end_to_end.py",
        [
            (
                '(1) the context of Q given to K and vice versa',
                [
                    (CONTEXT_AWARE, 'q, k, gates = self.contextualizer(q, k, global_context, deep_context)',
                     'k, q, gates = self.contextualizer(k, q, global_context, deep_context)'),
                ],
            ),
            (
                '(2) deep context from the outputs of layers 1..l-1 (= inputs of 2..l)',
                [
                    (CONTEXT_AWARE, 'deep_context = torch.cat(history.layer_inputs, dim=-1)  # Eq. 9',
                     'deep_context = torch.cat(history.layer_inputs[1:] + [x], dim=-1)'),
                ],
            ),
            (
                '(3) global context averaged over padding too',
                [
                    (CONTEXT_AWARE, 'layer_mean = masked_mean(x, padding_mask).unsqueeze(0)',
                     'layer_mean = masked_mean(x, None).unsqueeze(0)'),
                ],
            ),
            (
                '(4) decoder global context over the whole target (no prefix)',
                [
                    (CONTEXT_AWARE, '            if self.causal:\n',
                     '            if False:\n'),
                ],
            ),
            (
                '(5) contexts built from V = H^l W_V instead of H^l',
                [
                    (CONTEXT_AWARE, 'global_context, deep_context = self._gather_context(query, key_padding_mask, saved_state)',
                     'global_context, deep_context = self._gather_context(self.v_proj(query), key_padding_mask, saved_state)'),
                ],
            ),
            (
                '(6) the gate bias (--context-gate-bias, not in the paper) dropped from the logit of Eq. 6',
                [
                    (CONTEXT_AWARE_MODULE, 'logit = logit + self.gate_bias[index : index + 1].to(logit.dtype)  # not in the paper',
                     'logit = logit'),
                ],
            ),
            (
                "(7) decoder layers built with the encoder's head count (unequal sides)",
                [
                    (CONTEXT_AWARE, '            cfg.decoder.attention_heads,\n', '            cfg.encoder.attention_heads,\n'),
                ],
            ),
            (
                '(8) no attention dropout on the fused (training) path',
                [
                    (CONTEXT_AWARE, 'attn_mask=mask, dropout_p=dropout_p, scale=sdpa_scale)',
                     'attn_mask=mask, dropout_p=0.0, scale=sdpa_scale)'),
                ],
                "tests/test_context_aware_model.py::test_attention_dropout_drops_the_contextualised_probabilities",
            ),
            (
                '(9) decoder layers built without attention dropout',
                [
                    (CONTEXT_AWARE, '            cfg.decoder.attention_heads,\n            dropout=cfg.attention_dropout,',
                     '            cfg.decoder.attention_heads,\n            dropout=0.0,'),
                ],
                "tests/test_context_aware_model.py::test_attention_dropout_reaches_every_contextualised_layer",
            ),
            (
                '(10) --context-stop-key-gradient (not in the paper): the term still sends K its gradient',
                [
                    (CONTEXT_AWARE, '            k = torch.cat([k, k.detach()], dim=-1)', '            k = torch.cat([k, k], dim=-1)'),
                ],
                "tests/test_context_aware_stop_key_gradient.py::test_the_layer_and_its_gradients_match_the_equations",
            ),
        ],
    ),
    "cross_agg": (
        "tests/test_cross_agg_equations_end_to_end.py",
        [
            (
                '(1) routing along the wrong axis (queries/keys swapped)',
                [
                    (CROSS_AGG, '            logits.view(bsz, self.num_heads, tgt_len, src_len), capsule_padding_mask, routing_state\n        )\n',
                     '            logits.view(bsz, self.num_heads, tgt_len, src_len).transpose(2, 3), capsule_padding_mask, routing_state\n        )\n        routed = routed.transpose(2, 3).contiguous()\n'),
                ],
            ),
            (
                '(2) the routed term skipped in encoder layer 2',
                [
                    (CROSS_AGG, '        layer = CrossAggEncoderLayer(cfg, return_fc=self.return_fc, name=next_layer_name(self, "encoder"))\n',
                     '        layer = CrossAggEncoderLayer(cfg, return_fc=self.return_fc, name=next_layer_name(self, "encoder"))\n'
                     '        layer.self_attn.skip_routing = self._layers_named == 2  # the second layer built\n'),
                    (CROSS_AGG, '        logits = logits + routed.view_as(logits).to(logits.dtype)  # Eq. 9: E^ = E + Omega^v + Omega^h',
                     "        if not getattr(self, 'skip_routing', False):\n            logits = logits + routed.view_as(logits).to(logits.dtype)"),
                ],
            ),
            (
                '(3) no capsule padding mask',
                [
                    (CROSS_AGG, '            capsule_padding_mask = key_padding_mask\n',
                     '            capsule_padding_mask = None\n'),
                ],
            ),
            (
                '(4) decoder layers routed non-causally',
                [
                    (CROSS_AGG, '            routing=routing_options(cfg, causal=True),',
                     '            routing=routing_options(cfg, causal=False),'),
                ],
            ),
            (
                "(5) decoder layers built with the encoder's head count (unequal sides)",
                [
                    (CROSS_AGG, '            cfg.decoder.attention_heads,\n', '            cfg.encoder.attention_heads,\n'),
                ],
            ),
            (
                '(6) no attention dropout after the routed softmax',
                [
                    (CROSS_AGG, 'attn_probs = self.dropout_module(attn_weights_float.type_as(logits))',
                     'attn_probs = attn_weights_float.type_as(logits)'),
                ],
                "tests/test_cross_agg_model.py::test_attention_dropout_drops_the_routed_probabilities",
            ),
            (
                '(7) encoder layers built without attention dropout',
                [
                    (CROSS_AGG, '            cfg.encoder.attention_heads,\n            dropout=cfg.attention_dropout,',
                     '            cfg.encoder.attention_heads,\n            dropout=0.0,'),
                ],
                "tests/test_cross_agg_model.py::test_attention_dropout_reaches_every_routed_layer",
            ),
        ],
    ),
    "multihop": (
        "tests/test_multihop_equations_end_to_end.py",
        [
            (
                "(1) every extra hop fed the first hop's contexts",
                [
                    (MULTIHOP_MODULE, "        for hop in self.hops:  # Eq. 7-9 or Eq. 19, each hop on the previous hop's output\n            contexts, _ = hop(queries, contexts)\n",
                     '        first = contexts\n        for hop in self.hops:\n            contexts, _ = hop(queries, first)\n'),
                ],
            ),
            (
                '(2) source padding mask dropped',
                [
                    (MULTIHOP_MODULE, '        if encoder_padding_mask is not None:\n            scores = scores.masked_fill',
                     '        if False:\n            scores = scores.masked_fill'),
                ],
            ),
            (
                '(3) glue ignores --hop-mode (always dependent)',
                [
                    (MULTIHOP_MODEL, '            hop_mode=args.hop_mode,',
                     '            hop_mode="dependent",'),
                ],
            ),
            (
                '(4) Eq. 8 softmax over the batch instead of the heads',
                [
                    (MULTIHOP_MODULE, 'return F.softmax(scores, dim=-1).to(u_b_c.dtype).unsqueeze(-1)',
                     'return F.softmax(scores, dim=0).to(u_b_c.dtype).unsqueeze(-1)'),
                ],
            ),
        ],
    ),
}


# seconds a mutation's tests may run (each takes about a second)
CHILD_TIMEOUT_S = 300


def _pytest_in_a_fork(test):
    """Run pytest on ``test`` in a child forked from this process, which has imported torch,
    fairseq and pytest but never fairseq_ctx or the tests: the child imports the (mutated)
    model code afresh, without the seconds a new interpreter spends importing the libraries
    for each mutation. Returns (exit status, stdout text)."""
    import tempfile

    with tempfile.TemporaryFile(mode="w+") as out:
        pid = os.fork()
        if pid == 0:  # the child: its stdout and stderr into ``out``, never back into the caller
            status = 1
            try:
                signal.alarm(CHILD_TIMEOUT_S)  # a mutation that loops forever ends as killed (SIGALRM)
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                os.chdir(ROOT)
                sys.path.insert(0, ROOT)
                import pytest

                status = int(pytest.main([test, "-q", "-rfE", "-p", "no:warnings", "-p", "no:cacheprovider"]))
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        _, wait_status = os.waitpid(pid, 0)
        out.seek(0)
        return os.waitstatus_to_exitcode(wait_status), out.read()


def run(family):
    # the libraries once, here; the model code (mutated) in each child. No .pyc files: two
    # mutations of the same size written in the same second would share a stale one
    sys.dont_write_bytecode = True
    os.environ.update(OMP_NUM_THREADS="1", COLUMNS="1000")  # every summary line keeps its reason
    import fairseq.models.transformer  # noqa: F401
    import pytest  # noqa: F401
    import torch

    torch.set_num_threads(1)
    assert not any(name.split(".")[0] in ("fairseq_ctx", "tests") for name in sys.modules), \
        "the runner must not import the model code it mutates"
    family_test, mutations = MUTATIONS[family]
    for name, edits, *instead in mutations:
        test = instead[0] if instead else family_test
        originals = {}
        try:
            for path, old, new in edits:
                full = os.path.join(ROOT, path)
                originals.setdefault(full, open(full).read())
                text = open(full).read()
                if text.count(old) != 1:
                    raise SystemExit(f"{name}: the text to mutate is not in {path} exactly once")
                with open(full, "w") as handle:
                    handle.write(text.replace(old, new))
            returncode, stdout = _pytest_in_a_fork(test)
        finally:
            for full, text in originals.items():
                with open(full, "w") as handle:
                    handle.write(text)
        if returncode < 0:  # killed: the last line would be a crash dump's, not the cause
            reason = "timed out" if -returncode == signal.SIGALRM else signal.Signals(-returncode).name
            summary = f"killed by signal {-returncode} ({reason})"
        else:
            summary = stdout.strip().splitlines()[-1] if stdout.strip() else "(no output)"
        failures = [line for line in stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
        # a mutation counts as caught only when an equation check fails (an assertion), not
        # when the mutated code merely crashes (shape errors would "catch" anything)
        if not returncode:
            verdict = "MISSED"
        elif any("AssertionError" in line or " - assert" in line for line in failures):
            verdict = "CAUGHT"
        else:
            verdict = "CRASHED"
        print(f"{verdict}  {family} {name}  [{summary}]", flush=True)


if __name__ == "__main__":
    for family in sys.argv[1:] or list(MUTATIONS):
        run(family)
