# SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by mpe_torch's modules: numbers as Python and torch give them, never a
bool or a string taken for one."""
import operator

import torch


def _integer(value, name, what):
    # An int (or a 0-d integer tensor), never a bool or a float silently truncated.
    try:
        if isinstance(value, bool) or (torch.is_tensor(value) and value.dtype == torch.bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"mpe_torch: {name} = {value!r} must be {what}") from None


def _real(value, name):
    # A real number (a Python number or a 0-d real tensor), never a bool or a string that float()
    # would parse: a typo such as learning_rate="0.1" or learning_rate=True is an error, not 0.1 or 1.0.
    # NumPy's bool_ is no bool subclass: its dtype says what it is.
    if isinstance(value, (bool, str, bytes)) or str(getattr(value, "dtype", "")) == "bool" or (
            torch.is_tensor(value) and (value.dim() != 0 or value.dtype == torch.bool or value.is_complex())):
        raise TypeError(f"mpe_torch: {name} = {value!r} must be a real number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"mpe_torch: {name} = {value!r} must be a real number") from None
