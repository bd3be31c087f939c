import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
