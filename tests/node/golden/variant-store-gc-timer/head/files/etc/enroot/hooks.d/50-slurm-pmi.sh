#!/bin/bash
# enroot hook 50-slurm-pmi.sh (placeholder)
