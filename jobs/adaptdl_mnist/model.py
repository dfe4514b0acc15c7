"""The network of PyTorch's MNIST example, shared by both trainers of the job: AdaptDL's
replicas (train.py) and the fixed-size Ray Train baseline (fixed.py)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    """The network of PyTorch's MNIST example, unchanged."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)
