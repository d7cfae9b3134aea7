"""The pack's URL normaliser (policies/urls.py): every spelling of one address is one URL,
and a spelling two URL parsers could read as different hosts is none."""

from __future__ import annotations

import pytest

from policies.urls import normal_url, origin, remove_dot_segments

BASE = "https://scheduler-dedup-abc123-ew.a.run.app/"


@pytest.mark.parametrize("spelling", [
    "https://scheduler-dedup-abc123-ew.a.run.app",
    "https://scheduler-dedup-abc123-ew.a.run.app:443/",
    "HTTPS://SCHEDULER-DEDUP-ABC123-EW.A.RUN.APP/",
    "https://scheduler-dedup-abc123-ew.a.run.app./",
    "https://scheduler-dedup-abc123-ew.a.run.app/./",
    "https://scheduler-dedup-abc123-ew.a.run.app/x/../",
    "https://scheduler-dedup-abc123-ew.a.run.app/%2e/",
    "https://scheduler-dedup-abc123-ew.a.run.app/#fragment",
])
def test_spellings_of_one_address_are_one_url(spelling: str) -> None:
    url, base = normal_url(spelling), normal_url(BASE)
    assert url is not None and base is not None
    assert url == base and str(url) == BASE


@pytest.mark.parametrize("other", [
    "https://scheduler-dedup-abc123-ew.a.run.app:8443/",
    "http://scheduler-dedup-abc123-ew.a.run.app/",
    "https://scheduler-dedup-abc123-ew.a.run.app.attacker.example/",
    "https://scheduler-dedup-abc123-ew.a.run.app/?job=other",
    "https://scheduler-dedup-abc123-ew.a.run.app/other",
])
def test_other_addresses_are_other_urls(other: str) -> None:
    url, base = normal_url(other), normal_url(BASE)
    assert url is not None and base is not None
    assert not url.same_target(base)


@pytest.mark.parametrize("refused", [
    "https://user@scheduler-dedup-abc123-ew.a.run.app/",
    "https://scheduler-dedup-abc123-ew.a.run.app\\@evil.example/",
    "https://scheduler%2Ddedup.a.run.app/",
    "https://sch\u00e9duler.a.run.app/",
    "https://scheduler .a.run.app/",
    "ftp://scheduler-dedup-abc123-ew.a.run.app/",
    "https://scheduler-dedup-abc123-ew.a.run.app:99999/",
    "not a url",
])
def test_ambiguous_spellings_are_no_url(refused: str) -> None:
    assert normal_url(refused) is None
    assert origin(refused) is None


def test_a_path_is_within_by_whole_segments() -> None:
    function = normal_url("https://r-p.cloudfunctions.net/scheduler-dedup")
    assert function is not None
    for inside in ("https://r-p.cloudfunctions.net/scheduler-dedup/",
                   "https://r-p.cloudfunctions.net/scheduler-dedup/run?x=1",
                   "https://r-p.cloudfunctions.net/other/../scheduler-dedup"):
        url = normal_url(inside)
        assert url is not None and url.within(function), inside
    for outside in ("https://r-p.cloudfunctions.net/scheduler-dedup-proxy",
                    "https://r-p.cloudfunctions.net/scheduler-dedup/../other"):
        url = normal_url(outside)
        assert url is not None and not url.within(function), outside


def test_dot_segments_are_removed_as_rfc_3986_says() -> None:
    # RFC 3986 5.2.4 and the merged paths of its 5.4 examples.
    assert remove_dot_segments("/b/c/./../../g") == "/g"
    assert remove_dot_segments("/a/b/c/./../../g") == "/a/g"
    assert remove_dot_segments("/../../g") == "/g"
    assert remove_dot_segments("/b/c/.") == "/b/c/"
    assert remove_dot_segments("/b/c/..") == "/b/"
    assert remove_dot_segments("") == "/"
