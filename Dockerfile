# CUDA-capable image whose entry point is cood-harness, with the `models` extra (open_clip, transformers).
# The harness builds a sandbox for a submission file inside the container (docs/submitting.md: the sandbox), which
# needs CAP_SYS_ADMIN and no AppArmor mount ban for the harness; the submission itself runs with no capability:
#   docker build -t cood-bench .
#   docker run --gpus all --ipc=host --cap-add SYS_ADMIN --security-opt apparmor=unconfined -v $PWD:/work -v cood-cache:/cache \
#     cood-bench submit my_model.py --device cuda
#   docker run --gpus all --ipc=host --cap-add SYS_ADMIN --security-opt apparmor=unconfined -v $PWD:/work -v cood-cache:/cache \
#     --entrypoint torchrun cood-bench \
#     --nproc-per-node 8 --no-python cood-harness submit my_model.py --device cuda
# The working folder /work is the submission's: PYTHONSAFEPATH keeps it off the front of sys.path for any `python`
# started there, and torchrun runs the console script (--no-python), so no file of it is imported by the harness.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 COOD_BENCH_CACHE=/cache HF_HOME=/cache/huggingface
WORKDIR /opt/cood-bench
COPY pyproject.toml README.md ./
COPY harness harness
COPY dataset_builder dataset_builder
COPY leaderboard leaderboard
COPY examples examples
RUN pip install '.[models]' && cood-harness --help >/dev/null

WORKDIR /work
ENTRYPOINT ["cood-harness"]
CMD ["--help"]
