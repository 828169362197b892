"""The base image's Debian mirror comes from this machine's apt sources, whatever their format."""

from __future__ import annotations

from pathlib import Path

import pytest

from openforgerl.errors import UserError
from openforgerl.stack.base_image import MIRROR_ENV, find_mirror

# Loopback addresses only: the parser must not care what the host is, and nothing here is contacted.
MAIN = "http://127.0.0.1:3142/debian"
SECURITY = "http://127.0.0.2:3142/debian-security"


def apt_dir(tmp_path: Path, sources: dict[str, str] | None = None, sources_list: str | None = None) -> Path:
    (tmp_path / "sources.list.d").mkdir(parents=True)
    for name, text in (sources or {}).items():
        (tmp_path / "sources.list.d" / name).write_text(text)
    if sources_list is not None:
        (tmp_path / "sources.list").write_text(sources_list)
    return tmp_path


def test_deb822_picks_the_stanza_serving_the_suite_not_security(tmp_path):
    text = (f"Types: deb\nURIs: {SECURITY}\nSuites: bookworm-security\nComponents: main\n\n"
            f"Types: deb\n# a comment inside the stanza\nURIs: {MAIN}\nSuites: bookworm bookworm-updates\n"
            "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    assert find_mirror(apt_dir=apt_dir(tmp_path, {"debian.sources": text})) == MAIN


def test_deb822_skips_disabled_and_source_only_stanzas(tmp_path):
    text = (f"Types: deb\nURIs: http://127.0.0.9/off\nSuites: bookworm\nEnabled: no\n\n"
            f"Types: deb-src\nURIs: http://127.0.0.9/src\nSuites: bookworm\n\n"
            f"Types: deb deb-src\nURIs: {MAIN}\nSuites: bookworm\n")
    assert find_mirror(apt_dir=apt_dir(tmp_path, {"a.sources": text})) == MAIN


def test_one_line_sources_with_options_and_comments(tmp_path):
    text = ("# deb http://127.0.0.9/commented bookworm main\n"
            f"deb-src {MAIN} bookworm main\n"
            f"deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] {SECURITY} bookworm-security main\n"
            f"deb [trusted=yes] {MAIN} bookworm main contrib  # the main archive\n")
    assert find_mirror(apt_dir=apt_dir(tmp_path, sources_list=text)) == MAIN


def test_another_release_host_falls_back_to_its_main_archive(tmp_path):
    # A trixie host: no source lists bookworm, but its main archive serves bookworm too.
    text = (f"deb {SECURITY} trixie-security main\n"
            f"deb {MAIN} trixie main\n")
    assert find_mirror(apt_dir=apt_dir(tmp_path, sources_list=text)) == MAIN


def test_environment_variable_wins_over_apt_sources(tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, "http://127.0.0.5/debian")
    assert find_mirror(apt_dir=apt_dir(tmp_path, sources_list=f"deb {MAIN} bookworm main\n")) == "http://127.0.0.5/debian"


def test_no_usable_source_says_how_to_pass_a_mirror(tmp_path):
    text = f"deb-src {MAIN} bookworm main\ndeb cdrom:[Debian 12]/ bookworm main\n"
    with pytest.raises(UserError) as caught:
        find_mirror(apt_dir=apt_dir(tmp_path, sources_list=text))
    assert "no Debian mirror found" in str(caught.value)
    assert "--mirror" in caught.value.fix and MIRROR_ENV in caught.value.fix
