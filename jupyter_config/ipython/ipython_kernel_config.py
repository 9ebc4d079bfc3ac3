"""IPython kernel config shipped with gpuhub: load gpuhub's magics in every kernel.

The wheel installs it as ``<env>/etc/ipython/ipython_kernel_config.py`` (pyproject's
shared-data; the images copy it to the same place), and IPython reads that directory for every
kernel of the environment, so ``%gpu``, ``%submit``, ``%jobs`` and ``%job`` work without
``%load_ext gpuhub_lab`` in the demo, in the images and in jobs' kernels alike.

``extra_extensions`` rather than ``extensions``: a user's own profile that sets
``c.InteractiveShellApp.extensions = [...]`` replaces that list, but leaves this one alone. If
loading fails, IPython logs why and the kernel starts anyway.
"""

c = get_config()  # noqa: F821  (provided by IPython when it loads this file)

c.InteractiveShellApp.extra_extensions.append("gpuhub_lab")
