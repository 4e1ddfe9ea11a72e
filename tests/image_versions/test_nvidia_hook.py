"""clusterkit_node.image.nvidia_hook against the behaviour read from enroot 4.1.2's 98-nvidia.sh and envfmt and
libnvidia-container 1.17.0's dsl.c (the expected values were worked out from those sources, and bash's read for
the trailing '=' case was checked with bash 5.2)."""
from __future__ import annotations

import pytest

from clusterkit_node.image.nvidia_hook import (
    NO_DEVICES,
    NO_GPU,
    NO_LIBCUDA,
    OK,
    REFUSED,
    UNKNOWN,
    Driver,
    nvidia_settings,
    plan,
    requirement,
    verdict,
)

D580 = Driver("580.159.04", "13.0")
D570 = Driver("570.172.08", "12.8")
CUDA129 = ("cuda>=12.9 brand=unknown,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 "
           "brand=tesla,driver>=570,driver<571")


@pytest.mark.parametrize("expr, on580, on570", [
    ("cuda>=13.2", False, False), ("cuda>=13.0", True, False), ("cuda>=13.0.0", True, False),
    ("cuda!13.0", False, True),            # '!' alone matches the '!=' operator (strncmp over the run)
    ("cuda==12", False, False),            # no operator '==': invalid expression
    ("foo>=1", False, False), ("", True, True), (" ,", True, True), ("cuda>=99 ,", False, False),
    ("driver>=580.159.4", True, False), ("driver>=580.159.05", False, False),
    (CUDA129, True, None),                 # on 570 only brand=tesla can satisfy it: not known offline
])
def test_requirement_grammar(expr, on580, on570):
    assert requirement(expr, D580)[0] is on580 and requirement(expr, D570)[0] is on570
    assert requirement(CUDA129, Driver("570.1", "12.8", brand="Tesla"))[0] is True
    assert requirement(CUDA129, Driver("570.1", "12.8", brand="Nvidia"))[0] is False


def test_settings_as_the_hook_reads_them():
    env = ["NVIDIA_VISIBLE_DEVICES=void", "  NVIDIA_VISIBLE_DEVICES=all", 'NVIDIA_DRIVER_CAPABILITIES="compute"',
           "# NVIDIA_REQUIRE_X=cuda>=99", "ENROOT_X=1", "NVIDIA_REQUIRE_A=b=", "PATH=/bin", 42]
    assert nvidia_settings(env) == {"NVIDIA_DRIVER_CAPABILITIES": "compute", "NVIDIA_REQUIRE_A": "b",
                                    "NVIDIA_VISIBLE_DEVICES": "all"}
    assert plan({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all,bogus"}).libcuda


@pytest.mark.parametrize("settings, outcome", [
    ({}, NO_GPU), ({"NVIDIA_VISIBLE_DEVICES": "void"}, NO_GPU),
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, NO_LIBCUDA),
    ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,bogus"}, REFUSED),
    ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all", "NVIDIA_REQUIRE_CUDA": "cuda>=13.2"},
     REFUSED),
    ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all", "NVIDIA_REQUIRE_CUDA": "cuda>=13.2",
      "NVIDIA_DISABLE_REQUIRE": "1"}, OK),
    ({"NVIDIA_VISIBLE_DEVICES": "none", "NVIDIA_DRIVER_CAPABILITIES": "all"}, NO_DEVICES),
    ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
      "NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}, OK),
])
def test_verdict_on_driver_580(settings, outcome):
    assert verdict(settings, D580).outcome == outcome
    assert verdict({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all",
                    "NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}, Driver(None, None)).outcome == UNKNOWN
