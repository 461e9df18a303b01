"""A run records where it came from: versions, the git commit, the command."""

import json

import torch

from gazelle.algorithms.runstate import write_config
from gazelle.config import Config
from gazelle.provenance import PROVENANCE_FILE, git_commit


def test_write_config_records_versions_and_commit(tmp_path):
    write_config(tmp_path, Config.of(env="CartPole-v1"))
    info = json.loads((tmp_path / PROVENANCE_FILE).read_text())
    assert info["versions"]["torch"] == torch.__version__
    assert info["versions"]["gazelle"] and info["versions"]["gymnasium"]
    assert info["versions"]["ale-py"]
    commit = git_commit()
    assert info["git_commit"] == commit  # this test runs from the checkout
    assert commit is None or len(commit.split("+")[0]) == 40
    assert git_commit(tmp_path) is None  # not a checkout
