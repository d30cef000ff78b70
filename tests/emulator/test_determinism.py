from __future__ import annotations

import orjson

from lumos.emulator import emulate, write_result


def _manifest(path):
    m = orjson.loads((path / "manifest.json").read_bytes())
    m.pop("wall_s")
    return m


def test_same_seed_same_bytes(tiny_run, tmp_path):
    out, result = tiny_run
    again = emulate(["model=tiny", "seed=3"], progress=False)
    write_result(again, tmp_path)
    for r in result.ranks:
        assert (out / f"rank{r}.json.gz").read_bytes() == (tmp_path / f"rank{r}.json.gz").read_bytes()
    assert _manifest(out) == _manifest(tmp_path)


def test_different_seeds_differ(tiny_run, tmp_path):
    out, result = tiny_run
    other = emulate(["model=tiny", "seed=4"], progress=False)
    write_result(other, tmp_path)
    assert (out / "rank0.json.gz").read_bytes() != (tmp_path / "rank0.json.gz").read_bytes()
    assert other.iteration_us != result.iteration_us
