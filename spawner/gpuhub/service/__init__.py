"""The ``gpuhub`` JupyterHub service: creates users' jobs on the cluster with its own credentials.

Run as ``python -m gpuhub.service --config /etc/gpuhub/service.yaml`` (the Helm chart does).
:mod:`.config` (the YAML contract), :mod:`.notebook` (the notebook as shipped by the user's
server), :mod:`.app` (the tornado API, HubAuth), :mod:`.__main__` (start-up).
"""
