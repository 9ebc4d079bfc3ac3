pytest_plugins = ["tests.kubesim.pytest_plugin"]
