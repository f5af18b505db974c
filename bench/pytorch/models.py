#!/usr/bin/env python3
"""PyTorch versions of tandem's two reference models, for side-by-side speed
and convergence comparisons.

- Gpt: a GPT-2 layout decoder (pre-norm blocks, tied output head).
- ResNet: He et al.'s CIFAR ResNet (BasicBlocks, three stages), with 1x1
  conv + BatchNorm projection shortcuts where the stride is 2 or the number
  of channels changes.

Parameter names are fixed (see the module attributes) so that weights can be
compared with tandem's later. Works with PyTorch 1.13 (Debian's python3-torch)
and PyTorch 2.x; on 1.13 the attention falls back to a plain masked softmax.

    python3 models.py      # prints the parameter counts of the defaults
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, context, dropout=0.0, use_sdpa=None):
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.heads = heads
        self.head_dim = width // heads
        self.dropout = dropout
        self.use_sdpa = HAS_SDPA if use_sdpa is None else (use_sdpa and HAS_SDPA)
        self.qkv = nn.Linear(width, 3 * width, bias=True)
        self.proj = nn.Linear(width, width, bias=True)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        # True above the diagonal: positions a query must not see. Not part of
        # the state dict, so the weights' names and count stay clean.
        mask = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, D)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            scores = scores.masked_fill(self.causal_mask[:t, :t], float("-inf"))
            y = self.attn_dropout(torch.softmax(scores, dim=-1)) @ v
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.resid_dropout(self.proj(y))


class Mlp(nn.Module):
    def __init__(self, width, mlp_ratio=4, dropout=0.0):
        super().__init__()
        self.fc = nn.Linear(width, mlp_ratio * width, bias=True)
        self.gelu = nn.GELU(approximate="tanh")
        self.proj = nn.Linear(mlp_ratio * width, width, bias=True)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.proj(self.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, width, heads, context, mlp_ratio=4, dropout=0.0, use_sdpa=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-5)
        self.attention = CausalSelfAttention(width, heads, context, dropout, use_sdpa)
        self.norm2 = nn.LayerNorm(width, eps=1e-5)
        self.mlp = Mlp(width, mlp_ratio, dropout)

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


class Gpt(nn.Module):
    """GPT-2 layout: token + learned position embeddings, pre-norm blocks,
    final LayerNorm, logits through the (tied) token embedding, no bias.

    forward(tokens: LongTensor (B, T), T <= context) -> logits (B, T, vocabulary)
    """

    def __init__(self, vocabulary=256, context=128, layers=6, width=256, heads=8,
                 mlp_ratio=4, dropout=0.0, use_sdpa=None):
        super().__init__()
        self.context = context
        self.token_embedding = nn.Embedding(vocabulary, width)
        self.position_embedding = nn.Embedding(context, width)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[
            Block(width, heads, context, mlp_ratio, dropout, use_sdpa) for _ in range(layers)])
        self.norm = nn.LayerNorm(width, eps=1e-5)
        self._init_gpt2(layers)

    def _init_gpt2(self, layers):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        residual_std = 0.02 / math.sqrt(2 * layers)
        for block in self.blocks:
            nn.init.normal_(block.attention.proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.proj.weight, mean=0.0, std=residual_std)

    def forward(self, tokens):
        t = tokens.shape[1]
        if t > self.context:
            raise ValueError(f"sequence of {t} tokens is longer than the context {self.context}")
        positions = torch.arange(t, device=tokens.device)
        x = self.dropout(self.token_embedding(tokens) + self.position_embedding(positions))
        x = self.blocks(x)
        x = self.norm(x)
        return x @ self.token_embedding.weight.t()


class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels))
        else:
            self.shortcut = None

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + identity)


class ResNet(nn.Module):
    """CIFAR ResNet (depth = 6n + 2): stem, three stages of n BasicBlocks with
    widths w, 2w, 4w (the first block of stages 1 and 2 strides by 2), global
    average pool, linear head. PyTorch default inits.

    forward(images: (N, channels, H, W)) -> logits (N, classes)
    """

    def __init__(self, depth=20, width=16, channels=1, classes=10):
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"depth must be 6n + 2 with n >= 1, got {depth}")
        n = (depth - 2) // 6
        self.stem = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True))
        stages = []
        in_channels = width
        for i, out_channels in enumerate((width, 2 * width, 4 * width)):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(BasicBlock(in_channels, out_channels, stride))
                in_channels = out_channels
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(self.pool(x), 1))


def count_parameters(model):
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


EXPECTED = {"gpt": 4_837_376, "resnet": 272_186}


def main():
    torch.manual_seed(0)
    counts = {"gpt": count_parameters(Gpt()), "resnet": count_parameters(ResNet())}
    ok = True
    for name, count in counts.items():
        match = count == EXPECTED[name]
        ok &= match
        print(f"{name:7s} {count:>10,d} parameters (expected {EXPECTED[name]:,d}: "
              f"{'ok' if match else 'MISMATCH'})")
    print(f"torch {torch.__version__}, scaled_dot_product_attention: {HAS_SDPA}")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
