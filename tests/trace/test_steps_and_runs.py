"""The default step, an empty step, unmodelled device events, and which directories are one run."""

from __future__ import annotations

import pytest

from lumos.errors import UserError
from lumos.graph import build_graph
from lumos.trace import EmptyStepError, TraceError, load_run, load_trace, select_step, write_trace

from ..tracegen import MAIN, PID, TraceBuilder


def _step(t: TraceBuilder, number: int, start: float, end: float) -> None:
    t.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": PID,
                     "tid": MAIN, "ts": start, "dur": end - start, "args": {}})


def test_default_is_the_second_step_when_every_step_holds_work():
    t = TraceBuilder(step=(0.0, 1000.0))
    _step(t, 2, 1000.0, 2000.0)
    _step(t, 3, 2000.0, 2050.0)           # a short last step is no matter when it is not the default
    for k, start in enumerate((0.0, 1000.0, 2000.0)):
        t.launch(f"k{k}", start + 10, 5, start + 20, 30)
    s = select_step(t.table())
    assert (s.number, s.note) == (2, "")


def test_a_second_step_that_is_a_stub_is_skipped_and_the_choice_said():
    t = TraceBuilder(step=(0.0, 1000.0))
    _step(t, 2, 1000.0, 1049.0)           # the profiler stopped: 49 us, nothing in it
    t.launch("k", 10, 5, 20, 30)
    s = select_step(t.table())
    assert s.number == 1
    assert s.note == ("default step ProfilerStep#1 taken: ProfilerStep#2 (0.049 ms) holds no CPU op, "
                      "runtime call or annotation")


def test_a_short_last_step_with_work_is_cut_short_when_it_would_be_the_default():
    t = TraceBuilder(step=(0.0, 1000.0))
    _step(t, 2, 1000.0, 1050.0)           # 50 us: under 10% of the other step's 1000 us
    t.launch("k1", 10, 5, 20, 30)
    t.launch("k2", 1010, 5, 1020, 10)
    s = select_step(t.table())
    assert s.number == 1
    assert "ProfilerStep#2 (0.050 ms) is the last step and shorter than 10% of the others' median (1.000 ms)" in s.note


def test_a_stub_step_asked_for_by_number_is_an_error_naming_what_the_trace_holds():
    t = TraceBuilder(step=(0.0, 1000.0))
    _step(t, 2, 1000.0, 1049.0)
    t.launch("k", 10, 5, 20, 30)
    with pytest.raises(EmptyStepError) as err:
        build_graph(t.table(), step=2)
    assert str(err.value) == (
        "synthetic.json: step 2 (ProfilerStep#2, 0.049 ms) holds nothing to replay: no CPU op, runtime call or "
        "GPU op launched in it. Steps in the trace: #1 (1.000 ms), #2 (0.049 ms); events by category: "
        "user_annotation 2, cuda_runtime 1, kernel 1")
    # bad input the user fixes: both kinds of error the CLI prints as one line
    assert isinstance(err.value, TraceError) and isinstance(err.value, UserError)


def test_the_only_step_being_empty_is_an_error_not_zeros():
    t = TraceBuilder(step=(0.0, 100.0))
    t.launch("late", 500, 5, 510, 30)     # after the step: not its work
    with pytest.raises(EmptyStepError, match=r"step 1 \(ProfilerStep#1, 0.100 ms\) holds nothing to replay"):
        build_graph(t.table())


def test_unmodelled_device_events_are_counted_and_named(tmp_path):
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 30)
    for k in range(3):
        t.gpu("ccp_op", 60 + 10 * k, 5, cat="mtia_ccp_events")
    t.events.append({"ph": "X", "cat": "python_function", "name": "f", "pid": PID, "tid": MAIN,
                     "ts": 1, "dur": 1, "args": {}})  # host-side, not a device event
    table = load_trace(t.write(tmp_path / "t.json"))
    assert table.unmodelled == {"mtia_ccp_events": 3} and table.unmodelled_us == {"mtia_ccp_events": 15.0}
    g = build_graph(table)
    assert g.summary["unmodelled_device_events"] == {"mtia_ccp_events": 3}
    assert g.summary["unmodelled_note"] == ("3 device events of categories Lumos does not model "
                                            "(mtia_ccp_events 3), 0.015 ms, 33.3% of the trace's device time")
    assert "ccp_op" not in set(g.name)


def test_a_trace_of_only_unmodelled_device_events_names_them(tmp_path):
    path = tmp_path / "t.json"
    write_trace(path, [{"ph": "X", "cat": "hpu_op", "name": "x", "pid": 0, "tid": 1, "ts": 0, "dur": 1,
                        "args": {"device": 0}}], {})
    with pytest.raises(TraceError, match="no CPU or GPU events of a known category; it holds device events of "
                                         "categories Lumos does not model: hpu_op 1"):
        load_trace(path)


# --- directories of ranks ------------------------------------------------------------------

def _rank_file(path, rank=None, world=None):
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 30)
    dist = {} if rank is None else {"distributedInfo": {"rank": rank, **({} if world is None else
                                                                        {"world_size": world})}}
    write_trace(path, t.events, dist)


def test_two_files_claiming_rank_0_are_refused(tmp_path):
    _rank_file(tmp_path / "a.json", 0, 2)
    _rank_file(tmp_path / "b.json", 0, 2)
    with pytest.raises(TraceError) as err:
        load_run(tmp_path)
    assert str(err.value) == (f"{tmp_path}: the files are not ranks of one run: a.json and b.json both claim "
                              "rank 0; pass --ranks-from-files to take each file as its own rank, in "
                              "file-name order")


def test_world_sizes_that_disagree_are_refused(tmp_path):
    _rank_file(tmp_path / "a.json", 0, 8)
    _rank_file(tmp_path / "b.json", 1, 2)
    with pytest.raises(TraceError, match=r"world sizes disagree \(a.json says 8, b.json says 2\)"):
        load_run(tmp_path)


def test_files_without_rank_info_are_refused(tmp_path):
    _rank_file(tmp_path / "a.json", 0, 2)
    _rank_file(tmp_path / "b.json")
    with pytest.raises(TraceError, match=r"b.json carries no rank \(no distributedInfo.rank, and its name says none: "):
        load_run(tmp_path)


def test_a_rank_outside_its_world_is_refused(tmp_path):
    _rank_file(tmp_path / "a.json", 0, 2)
    _rank_file(tmp_path / "b.json", 2, 2)
    with pytest.raises(TraceError) as err:   # by the file itself (absurd ranks are refused at load)
        load_run(tmp_path)
    assert str(err.value) == \
        f"{tmp_path / 'b.json'}: 'distributedInfo.rank' 2 is not a rank of a world of size 2 (0 to 1)"


def test_a_rank_from_a_file_name_outside_its_world_is_refused(tmp_path):
    _rank_file(tmp_path / "rank0.json", 0, 2)
    t = TraceBuilder()
    t.launch("k", 10, 5, 20, 30)
    write_trace(tmp_path / "rank2.json", t.events, {"distributedInfo": {"world_size": 2}})   # rank from the name
    with pytest.raises(TraceError, match="rank2.json claims rank 2 of a world of size 2"):
        load_run(tmp_path)


def test_ranks_from_files_takes_file_name_order(tmp_path):
    _rank_file(tmp_path / "b.json", 0, 1)
    _rank_file(tmp_path / "a.json", 0, 1)
    tables = load_run(tmp_path, ranks_from_files=True)
    assert [(t.rank, t.world_size, t.path.rsplit("/", 1)[-1]) for t in tables] == [(0, 2, "a.json"),
                                                                                  (1, 2, "b.json")]
    assert all(t.metadata["rank_from_file_order"] for t in tables)


def test_ranks_of_one_run_load_in_rank_order(tmp_path):
    _rank_file(tmp_path / "a.json", 1, 2)
    _rank_file(tmp_path / "b.json", 0, 2)
    assert [t.rank for t in load_run(tmp_path)] == [0, 1]
