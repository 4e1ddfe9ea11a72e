#!/bin/bash
# enroot hook 50-slurm-pytorch.sh (placeholder)
