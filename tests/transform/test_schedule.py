"""The 1F1B schedule: exact order, warm-up/cool-down counts, and send/recv pairing."""

from lumos.transform.schedule import layers_of_stage, one_f_one_b


def _compute(actions):
    return [a for a in actions if a[0] in ("F", "B")]


def test_four_stages_eight_microbatches_exact_order():
    pp, m = 4, 8
    for s in range(pp):
        w = pp - s - 1
        expected = [("F", i) for i in range(w)]
        for j in range(m - w):
            expected += [("F", j + w), ("B", j)]
        expected += [("B", m - w + k) for k in range(w)]
        assert _compute(one_f_one_b(s, pp, m)) == expected
    assert _compute(one_f_one_b(0, 4, 8))[:5] == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0)]
    assert _compute(one_f_one_b(3, 4, 8))[:4] == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]


def test_exchanges_of_first_middle_last_stage():
    first, middle, last = one_f_one_b(0, 3, 2), one_f_one_b(1, 3, 2), one_f_one_b(2, 3, 2)
    assert first == [("F", 0), ("p2p", (("send", "fwd"),)), ("F", 1), ("p2p", (("send", "fwd"),)),
                     ("p2p", (("recv", "bwd"),)), ("B", 0), ("p2p", (("recv", "bwd"),)), ("B", 1)]
    assert middle == [("p2p", (("recv", "fwd"),)), ("F", 0), ("p2p", (("send", "fwd"),)),
                      ("p2p", (("recv", "fwd"),)), ("F", 1), ("p2p", (("send", "fwd"), ("recv", "bwd"))),
                      ("B", 0), ("p2p", (("send", "bwd"),)), ("p2p", (("recv", "bwd"),)), ("B", 1),
                      ("p2p", (("send", "bwd"),))]
    assert last == [("p2p", (("recv", "fwd"),)), ("F", 0), ("B", 0),
                    ("p2p", (("send", "bwd"), ("recv", "fwd"))), ("F", 1), ("B", 1),
                    ("p2p", (("send", "bwd"),))]


def test_sends_and_receives_pair_up_between_neighbours():
    pp, m = 4, 8
    for s in range(pp - 1):
        mine, nxt = one_f_one_b(s, pp, m), one_f_one_b(s + 1, pp, m)
        ops = lambda acts, op: sum(a[1].count(op) for a in acts if a[0] == "p2p")  # noqa: E731
        assert ops(mine, ("send", "fwd")) == ops(nxt, ("recv", "fwd")) == m
        assert ops(nxt, ("send", "bwd")) == ops(mine, ("recv", "bwd")) == m


def test_fewer_microbatches_than_stages():
    acts = one_f_one_b(0, 16, 8)
    assert _compute(acts) == [("F", i) for i in range(8)] + [("B", i) for i in range(8)]


def test_layers_spread_evenly():
    assert [list(layers_of_stage(s, 4, 48)) for s in (0, 3)] == [list(range(0, 12)), list(range(36, 48))]
    assert [len(layers_of_stage(s, 5, 12)) for s in range(5)] == [3, 3, 2, 2, 2]
