"""The rootfs cache is keyed by what goes into the image, so a recipe change rebuilds it."""

from __future__ import annotations

import pytest

from openforgerl.stack.base_image import INCLUDE, BaseImagePart, cached_rootfs, recipe_key


def test_changing_the_include_list_changes_the_cached_tarball():
    more = (*INCLUDE, "sqlite3")
    assert cached_rootfs(recipe_key(more)) != cached_rootfs(recipe_key(INCLUDE))
    assert BaseImagePart(include=more).key != BaseImagePart().key


def test_key_ignores_order_and_duplicates_of_the_include_list():
    assert recipe_key(tuple(reversed(INCLUDE))) == recipe_key((*INCLUDE, INCLUDE[0]))


def test_key_depends_on_suite_and_architecture_but_not_on_the_mirror():
    base = recipe_key(INCLUDE, "bookworm", "amd64")
    assert recipe_key(INCLUDE, "trixie", "amd64") != base
    assert recipe_key(INCLUDE, "bookworm", "arm64") != base
    assert BaseImagePart(mirror="http://127.0.0.1/a").key == BaseImagePart(mirror="http://127.0.0.1/b").key


def test_cache_lives_under_the_forge_home(own_forge_home):
    assert cached_rootfs(recipe_key()).is_relative_to(own_forge_home / "cache")


def test_a_full_disk_while_packing_the_rootfs_names_the_disk_not_the_mirror(tmp_path):
    from openforgerl.errors import ResourceError
    from openforgerl.stack.base_image import _run

    (tmp_path / "rootfs").mkdir()
    (tmp_path / "rootfs" / "file").write_text("x" * 100_000)
    # /dev/full fails every write with ENOSPC, as a full disk does.
    with pytest.raises(ResourceError) as caught:
        _run(["tar", "-C", str(tmp_path / "rootfs"), "-cf", "/dev/full", "."], "packing the rootfs")
    assert "no space left on device while packing the rootfs" in str(caught.value)
    assert "df -h" in caught.value.fix
