"""The training loop of pytorch/examples dcgan/main.py (lines 228-259 at commit 77f55b9), reproduced with
small MLPs on generated data (the example needs torchvision): D's two backwards (real, fake.detach()), D's
step, then G's backward through D -- which adds to D's gradients after D's step, cleared by the next
netD.zero_grad(). A healthy loop with two optimizers: no loop finding; the recorder states its choice."""
import torch
from torch import nn

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1), nn.Sigmoid())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_label, fake_label = 1.0, 0.0
for i in range(15):
    real = torch.randn(16, 8) * 0.5 + 1.0
    netD.zero_grad()
    label = torch.full((16,), real_label)
    errD_real = criterion(netD(real).view(-1), label)
    errD_real.backward()
    fake = netG(torch.randn(16, 4))
    label.fill_(fake_label)
    errD_fake = criterion(netD(fake.detach()).view(-1), label)
    errD_fake.backward()
    optimizerD.step()
    netG.zero_grad()
    label.fill_(real_label)
    errG = criterion(netD(fake).view(-1), label)
    errG.backward()
    optimizerG.step()
