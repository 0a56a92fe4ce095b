"""(RL) An on-policy RL loop in CleanRL's and Stable-Baselines3's styles:
a rollout, the policy acting under torch.no_grad() at each step of
NUM_ENVS environments stepped one after another on the training thread (a
SyncVectorEnv; the environment's physics is CPU work), then optimizer
steps on what it collected.

JOB_VARIANT:
  ppo   CleanRL's ppo.py: 64 steps of 4 environments, advantages by GAE
        under no_grad, then 4 epochs x 4 minibatches: a rollout every 16
        optimizer steps, the model called as agent.get_action_and_value,
        a method that calls the actor and the critic (two calls a step)
  a2c   Stable-Baselines3's A2C shape, the policy left in train mode:
        5 steps of 4 environments, one optimizer step: a rollout before
        every step
  sb3   the same as SB3 runs it: policy.set_training_mode(False) for the
        rollout (model.eval()), True for the update

The oracle: optimizer steps, and the rollouts' share of the loop's time
(no_grad_share), each rollout timed inline; no data wait (the loop fetches
nothing: the rollout is its data)."""
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

VARIANT = os.environ.get("JOB_VARIANT", "ppo")
NUM_ENVS = 4
OBS, ACTIONS = 8, 3
ENV_S = float(os.environ.get("JOB_ENV_S", "0.0003"))  # one environment's step
COMPUTE_S = 0.003
if VARIANT == "ppo":
    ITERS, NUM_STEPS, EPOCHS, MINIBATCHES = 8, 64, 4, 4
else:
    ITERS, NUM_STEPS, EPOCHS, MINIBATCHES = 60, 5, 1, 1
GAMMA, LAMBDA = 0.99, 0.95


class SyncVectorEnv:
    """NUM_ENVS environments stepped in turn (gymnasium's SyncVectorEnv)."""

    def __init__(self, n):
        self.rng = np.random.default_rng(0)
        self.n = n
        self.obs = self.rng.standard_normal((n, OBS)).astype(np.float32)

    def step(self, actions):
        rewards = np.zeros(self.n, np.float32)
        for i in range(self.n):
            busy(ENV_S)  # the physics
            self.obs[i] = self.rng.standard_normal(OBS).astype(np.float32)
            rewards[i] = float(actions[i] == 1)
        return self.obs.copy(), rewards, np.zeros(self.n, np.float32)


class Agent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = torch.nn.Sequential(torch.nn.Linear(OBS, 64), torch.nn.Tanh(),
                                          torch.nn.Linear(64, 1))
        self.actor = torch.nn.Sequential(torch.nn.Linear(OBS, 64), torch.nn.Tanh(),
                                         torch.nn.Linear(64, ACTIONS))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = torch.distributions.Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


envs = SyncVectorEnv(NUM_ENVS)
agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
clock = Clock()
obs = torch.zeros((NUM_STEPS, NUM_ENVS, OBS))
actions = torch.zeros((NUM_STEPS, NUM_ENVS), dtype=torch.long)
logprobs = torch.zeros((NUM_STEPS, NUM_ENVS))
rewards = torch.zeros((NUM_STEPS, NUM_ENVS))
dones = torch.zeros((NUM_STEPS, NUM_ENVS))
values = torch.zeros((NUM_STEPS, NUM_ENVS))
next_obs = torch.tensor(envs.obs)
next_done = torch.zeros(NUM_ENVS)


def rollout():
    global next_obs, next_done
    for step in range(NUM_STEPS):
        obs[step] = next_obs
        dones[step] = next_done
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
        actions[step] = action
        logprobs[step] = logprob
        o, r, d = envs.step(action.cpu().numpy())
        rewards[step] = torch.tensor(r)
        next_obs, next_done = torch.tensor(o), torch.tensor(d)
    with torch.no_grad():  # GAE, as CleanRL computes it
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(NUM_STEPS)):
            if t == NUM_STEPS - 1:
                nextnonterminal, nextvalues = 1.0 - next_done, next_value
            else:
                nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
            delta = rewards[t] + GAMMA * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + GAMMA * LAMBDA * nextnonterminal * lastgaelam
    return advantages, advantages + values


batch = NUM_STEPS * NUM_ENVS
mb = batch // MINIBATCHES
for iteration in range(ITERS):
    if VARIANT == "sb3":
        # SB3's policy.set_training_mode(False): an eval span of the
        # report, out of the step time as the oracle's eval runs are
        agent.train(False)
        t0 = time.perf_counter()
        advantages, returns = rollout()
        agent.train(True)
        if clock.t_first is not None:
            clock.eval_s += time.perf_counter() - t0
            clock.eval_run_s += time.perf_counter() - t0
    else:
        advantages, returns = clock.rollout(rollout)

    def flatten():
        idx = np.arange(batch)
        np.random.shuffle(idx)
        return idx, (obs.reshape(-1, OBS), actions.reshape(-1), logprobs.reshape(-1),
                     advantages.reshape(-1), returns.reshape(-1))
    idx, flat = clock.fetch(flatten)
    for epoch in range(EPOCHS):
        if epoch:
            np.random.shuffle(idx)
        for start in range(0, batch, mb):
            # the minibatch: the loop's batch preparation (its data wait)
            x, a, old_lp, adv, ret = clock.fetch(
                lambda: tuple(t[idx[start:start + mb]] for t in flat))
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(x, a)
            ratio = (newlogprob - old_lp).exp()
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - ret) ** 2).mean()
            loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
            time.sleep(COMPUTE_S)  # the rest of the step's compute, outside the GIL as on a GPU
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
            clock.step()
# SB3's rollouts under eval mode are eval spans of the report, one each
# after the first step (the first, before any backward pass, is none)
if VARIANT == "sb3":
    clock.eval_batches = ITERS - 1
if VARIANT == "sb3":
    clock.report()
else:  # each rollout after the first step: 2 calls (actor, critic) per
    # environment step and the critic's once more, for GAE's bootstrap value
    clock.report(rollouts=ITERS - 1, calls=2 * NUM_STEPS + 1)
