"""Arch-neutral kernel pieces shared by the sm_90a and sm_100a kernels."""
