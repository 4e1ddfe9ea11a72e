"""What ParallelCluster itself does on login nodes, read from its source (not imported: its CDK code needs a whole
config), so ClusterKit's login-node design (docs/security.md "Login nodes", docs/operations.md "Login nodes") fails
here the day a ParallelCluster upgrade changes it.

Real: the installed aws-parallelcluster 3.16.1 in .venv-pcluster (templates/login_nodes_stack.py, templates/
cluster_stack.py, schemas/cluster_schema.py, resources/login_node/user_data.sh). The cookbook's side is read from the
aws-parallelcluster-cookbook mirror when it is on this machine (newest mirrored commit f75d84c, before the 3.16.1 tag:
the tests name what they read), else skipped.
"""
from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from pcluster_helpers import REPO, needs_pcluster_venv

from clusterkit.pipeline.loader import load
from clusterkit.render.rendered_files import rendered_path

pytestmark = needs_pcluster_venv

PCLUSTER = next((REPO / ".venv-pcluster/lib").glob("python3*/site-packages/pcluster"), Path("/absent"))
COOKBOOK = Path(os.environ.get("CK_PC_COOKBOOK_GIT", "/work/.mirror/aws+aws-parallelcluster-cookbook/repo"))


def _tree(rel: str) -> ast.Module:
    return ast.parse((PCLUSTER / rel).read_text(encoding="utf-8"))


def _method(tree: ast.Module, cls: str, method: str) -> ast.FunctionDef:
    (klass,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    (function,) = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method]
    return function


def _dna_keys(node: ast.AST) -> set[str]:
    """The keys of the dict under "cluster" in the node's dna.json literal."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Dict):
            keys = [k.value for k in sub.keys if isinstance(k, ast.Constant)]
            if keys == ["cluster"]:
                inner = sub.values[0]
                assert isinstance(inner, ast.Dict)
                return {k.value for k in inner.keys if isinstance(k, ast.Constant)}
    raise AssertionError("no dna.json literal found")


def test_login_nodes_get_imds_locked_by_the_cookbooks_default():
    """PC 3.16.1's login-node dna.json carries node_type LoginNode and NO head_node_imds_secured (the head node's has
    it, from HeadNode.Imds.Secured): the cookbook's attribute default ('true') applies, so the IMDS lockdown always runs
    on login nodes and no config can turn it off (LoginNodesPoolSchema has no Imds)."""
    login = _dna_keys(_method(_tree("templates/login_nodes_stack.py"), "Pool", "_add_login_nodes_pool_launch_template"))
    head = _dna_keys(_method(_tree("templates/cluster_stack.py"), "ClusterCdkStack", "_add_head_node"))
    assert "node_type" in login and "head_node_imds_secured" not in login
    assert "head_node_imds_secured" in head
    source = (PCLUSTER / "templates/login_nodes_stack.py").read_text(encoding="utf-8")
    assert '"node_type": "LoginNode"' in source


def test_login_launch_template_requires_imdsv2_from_the_top_level_setting():
    """http_tokens = get_http_tokens_setting(config.imds.imds_support): "required" for ImdsSupport v2.0, which every
    rendered config sets."""
    method = _method(_tree("templates/login_nodes_stack.py"), "Pool", "_add_login_nodes_pool_launch_template")
    calls = [k.value for n in ast.walk(method) if isinstance(n, ast.Call) for k in n.keywords
             if k.arg == "http_tokens"]
    assert [ast.unparse(c) for c in calls] == ["get_http_tokens_setting(self._config.imds.imds_support)"]
    assert "return \"required\" if imds_support == \"v2.0\"" in (PCLUSTER / "utils.py").read_text(encoding="utf-8")
    assert yaml.safe_load(rendered_path(load("p5-capacity-block")).read_text())["Imds"] == {"ImdsSupport": "v2.0"}


def test_login_pools_run_custom_actions_and_have_no_root_volume_or_imds_setting():
    """ClusterKit's login setup rides on the pool's OnNodeStart/OnNodeConfigured: PC 3.16.1's login user data runs
    fetch_and_run -preinstall and -postinstall against the login nodes' copy of the config, and the pool schema takes
    CustomActions (OnNodeStart and OnNodeConfigured UNSUPPORTED for updates, OnNodeUpdated SUPPORTED) but no
    LocalStorage and no Imds."""
    user_data = (PCLUSTER / "resources/login_node/user_data.sh").read_text(encoding="utf-8")
    for phase in ("-preinstall", "-postinstall"):
        assert f"fetch_and_run {phase} -c /opt/parallelcluster/shared_login_nodes/cluster-config.yaml" in user_data
    schema = _tree("schemas/cluster_schema.py")
    fields = {cls: {t.id for n in c.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
              for c in schema.body if isinstance(c, ast.ClassDef) for cls in [c.name]}
    assert fields["LoginNodesPoolSchema"] == {"name", "instance_type", "image", "networking", "count", "dcv", "ssh",
                                              "custom_actions", "iam", "gracetime_period"}
    actions = (PCLUSTER / "schemas/cluster_schema.py").read_text(encoding="utf-8").split(
        "class LoginNodesCustomActionsSchema")[1].split("@post_load")[0]
    unsupported = 'OneOrManyCustomActionField(metadata={"update_policy": UpdatePolicy.UNSUPPORTED})'
    for field in ("on_node_start", "on_node_configured"):
        assert f"{field} = {unsupported}" in actions


def _cookbook(path: str) -> str:
    if not (COOKBOOK / "HEAD").exists():
        pytest.skip(f"aws-parallelcluster-cookbook mirror not at {COOKBOOK} (set CK_PC_COOKBOOK_GIT)")
    return subprocess.run(["git", f"--git-dir={COOKBOOK}", "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout


def test_cookbook_locks_imds_on_login_nodes_by_default():
    """The lockdown recipe runs on HeadNode and LoginNode; head_node_imds_secured defaults to 'true'; the users allowed
    are root, the cluster admin user and the OS default user (plus dcv where DCV runs)."""
    recipe = _cookbook("cookbooks/aws-parallelcluster-environment/recipes/config/imds.rb")
    assert "if %w(HeadNode LoginNode).include? node['cluster']['node_type']" in recipe
    attributes = _cookbook("cookbooks/aws-parallelcluster-environment/attributes/environment.rb")
    assert "default['cluster']['head_node_imds_secured'] = 'true'" in attributes
    assert ("default['cluster']['head_node_imds_allowed_users'] = ['root', node['cluster']['cluster_admin_user'], "
            "node['cluster']['cluster_user'] ]") in attributes


def test_cookbook_gives_login_nodes_the_shared_bundle_dir_and_opt_slurm():
    """Login nodes mount /opt/parallelcluster/shared (where the head node installs the ClusterKit bundle) in the init
    phase, before OnNodeStart, and /opt/slurm (plugstack.conf and plugstack.conf.d/pyxis.conf) in the config phase,
    before OnNodeConfigured: so login_node_stage0.sh finds login_node.sh, and srun there loads the head node's line."""
    ebs = _cookbook("cookbooks/aws-parallelcluster-environment/recipes/init/mount_internal_use_ebs.rb")
    login = ebs.split("when 'LoginNode'")[1].split("when 'HeadNode'")[0]
    assert "volume \"mount #{node['cluster']['shared_dir']}\" do" in login
    config_login = _cookbook("cookbooks/aws-parallelcluster-slurm/recipes/config/config_login.rb")
    assert "include_recipe 'aws-parallelcluster-slurm::mount_slurm_dir'" in config_login
