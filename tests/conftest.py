import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """One artifact cache for every inner pytest session of this run: a program compiled by
    one pytester session is loaded, not recompiled, by the next."""
    return tmp_path_factory.mktemp("aoti-cache")
