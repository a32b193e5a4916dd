import importlib
import inspect

import pytest

import lineage_data as ld
from lineage_data import exceptions

OLD_HOMES = [
    "lineage_data",
    "lineage_data._core.errors",
    "lineage_data.storage",
    "lineage_data.connectors.errors",
    "lineage_data.connectors.manifest",
]


def test_every_public_exception_is_a_lineage_error_defined_in_one_module():
    for name in exceptions.__all__:
        cls = getattr(exceptions, name)
        assert issubclass(cls, ld.LineageError), name
        assert cls.__module__ == "lineage_data.exceptions", name


@pytest.mark.parametrize("home", OLD_HOMES)
def test_the_old_import_paths_give_the_same_classes(home):
    module = importlib.import_module(home)
    exported = [
        n for n in getattr(module, "__all__", ()) if inspect.isclass(getattr(module, n, None))
    ]
    errors = [n for n in exported if issubclass(getattr(module, n), BaseException)]
    assert errors, home
    for name in errors:
        assert getattr(module, name) is getattr(exceptions, name), f"{home}.{name}"
