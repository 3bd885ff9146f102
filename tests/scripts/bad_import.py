import torch
import definitely_not_a_module_gradviz  # noqa
