"""IPython kernel config shipped in gpuhub's notebook images: load gpuhub's magics.

Installed as ``<env>/etc/ipython/ipython_kernel_config.py`` (IPython reads it for every kernel
of that environment, after ``~/.ipython``), so a user's home volume cannot hide it. Equivalent
to running ``%load_ext gpuhub_lab`` in each notebook; if loading fails, IPython logs why and
the kernel starts anyway.
"""

c = get_config()  # noqa: F821  (provided by IPython when it loads this file)

c.InteractiveShellApp.extensions.append("gpuhub_lab")
