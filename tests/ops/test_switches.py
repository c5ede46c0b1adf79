"""Every environment switch of a fast path reads one way (ops.switches): 0, false, off or no,
in any case and with spaces around, turns it off; unset or anything else leaves it on."""
import pytest

from rnnlens.ops import cpp, switches, triton_scan

OFF = ["0", "false", "False", "OFF", "off", " no ", "No\n"]
ON = [None, "1", "", "yes", "on", "true", "2"]


@pytest.mark.parametrize("value", OFF + ON)
def test_a_switch_is_off_for_the_usual_spellings_of_no(value, monkeypatch):
    if value is None:
        monkeypatch.delenv("RNNLENS_SOME_SWITCH", raising=False)
    else:
        monkeypatch.setenv("RNNLENS_SOME_SWITCH", value)
    assert switches.switched_off("RNNLENS_SOME_SWITCH") == (value in OFF)


@pytest.mark.parametrize("value", OFF)
def test_the_kernels_switches_read_through_it(value, monkeypatch):
    monkeypatch.setenv("RNNLENS_CPP", value)
    monkeypatch.setenv("RNNLENS_TRITON", value)
    assert not cpp.enabled() and not triton_scan.triton_enabled()


def test_no_switch_is_read_another_way():
    """No module of the package parses an RNNLENS_ switch by hand."""
    import pathlib
    import re
    root = pathlib.Path(switches.__file__).parents[1]
    pattern = re.compile(r"os\.environ\.get\(\s*['\"]RNNLENS_(CPP|ONEDNN|CUDA_GRAPHS|TRITON|TRITON_RATIONAL|MALLOC)['\"]")
    hits = [str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert hits == []
