"""Trident's built-in models (models/zoo.cpp) as PyTorch modules, with identical state-dict names,
shapes and order, so that weights move between the two with load_state_dict(..., strict=True).

    mlp     flatten, fc1 784-512, ReLU, fc2 512-10, log-softmax
    cnn     PyTorch's MNIST example: conv1 (1-10, k5), max-pool 2, ReLU, conv2 (10-20, k5),
            Dropout2d, max-pool 2, ReLU, fc1 320-50, ReLU, dropout, fc2 50-10, log-softmax
    resnet  conv1 3x3 (1-32, no bias), bn1, ReLU; BasicBlocks layer1 32-32, layer2 32-64 (stride 2),
            layer3 64-128 (stride 2); global average pooling; fc 128-10 (logits)

Each model's recipe normalises byte images as (x / 255 - MEAN) / STD with NORMALISATION[name].
"""
import torch.nn as nn
import torch.nn.functional as F


class SeedMLP(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, classes)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)


class SeedCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, classes)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, 0.5, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


class BasicBlock(nn.Module):
    """conv3x3(stride)-BN-ReLU-conv3x3-BN, plus the identity or a 1x1 conv + BN, then ReLU."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Sequential()  # empty: the identity, and no state-dict entries
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.layer1 = BasicBlock(32, 32, 1)
        self.layer2 = BasicBlock(32, 64, 2)
        self.layer3 = BasicBlock(64, 128, 2)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


MODELS = {"mlp": SeedMLP, "cnn": SeedCNN, "resnet": ResNet}
# (mean, std) of each recipe's byte-image normalisation (models/zoo.cpp).
NORMALISATION = {"mlp": (0.1307, 0.3081), "cnn": (0.1307, 0.3081), "resnet": (0.2860, 0.3530)}
# Whether the model's output is log-probabilities (trained with NLL) rather than logits.
LOG_PROBABILITIES = {"mlp": True, "cnn": True, "resnet": False}
