# The image of solci's own code on top of the dependency image: what docker-compose.yml runs (the runner
# and dashboard services), and what the Docker executor builds a commit into (from `git archive` of the
# commit, when the commit has no Dockerfile of its own).
#
#   docker build --build-arg BASE_IMAGE=solci-deps:cpu -t solci:latest .
#
# BASE_IMAGE is a variant of the dependency image made by docker/build_base_image.sh (docker/ci_setup.sh):
# solci-deps:cpu or solci-deps:cuda (solci-deps:latest: the one built last). It holds Debian bookworm,
# Python 3.11 with its headers, gcc, git, /opt/venv with every dependency at the pins of constraints.txt,
# and the unprivileged user solci; so a commit costs one source copy.
ARG BASE_IMAGE=solci-deps:latest
FROM ${BASE_IMAGE}

USER 0
WORKDIR /src
# Dependencies first, so this layer is cached until pyproject.toml changes. They are installed under the pins
# the base image was built with (/opt/venv/solci-constraints.txt), so a commit measures with the base's stack;
# when the base satisfies them (the usual case) pip installs nothing and needs no network.
COPY pyproject.toml /src/pyproject.toml
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pins=/opt/venv/solci-constraints.txt && if [ ! -f "$pins" ]; then pins=/dev/null; fi \
    && pip install --no-cache-dir --quiet -r /tmp/requirements.txt -c "$pins" \
    && (id solci >/dev/null 2>&1 || useradd --uid 10001 --user-group --create-home --shell /bin/bash solci) \
    && mkdir -p /out /data && chown solci:solci /out /data

COPY . /src
ENV PYTHONPATH=/src \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SOLCI_DB=/data/history.duckdb
# Measurements run unprivileged, as the user solci named by its uid (a cluster's run-as-non-root policy can only
# check a number; docker-compose.yml runs its services as root: see there).
USER 10001
CMD ["python", "-m", "ci.cli", "--help"]
