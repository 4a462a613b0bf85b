"""The target of collie_torch's "torch.backends" entry point: torch calls
register() at the end of `import torch`, so that init_process_group("collie")
works without `import collie_torch`. A collie_torch that cannot load (built
for another torch) must not break `import torch`: it warns instead, and the
explicit `import collie_torch` raises the reason.
(TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns torch's autoloading off.)"""


def register():
    try:
        import collie_torch  # noqa: F401  registers the backend
    except Exception as e:  # noqa: BLE001
        import warnings

        warnings.warn(f"collie_torch was not loaded, so init_process_group('collie') will not "
                      f"find it: {e}", RuntimeWarning, stacklevel=2)
