"""CUDA redirect: run original CUDA code on another device (cpu or tpx) with no edits.

``tools.redirect.install.install(target, log_path, repo_root)`` patches the running process;
``tools.redirect.log.load_redirect_log(path)`` reads the call-site log it writes. Kept free of
imports so the sandboxed child's bootstrap stays fast.
"""
