#!/usr/bin/env python3
"""Regenerate reference.json: optima of the L2-regularised logistic objective.

The Rust tests compare `dpgate_learn::logistic::Objective::minimise` against
these values, computed independently with numpy + scipy:

    J(w) = (1/N) sum_i log(1 + exp(-y_i w.x_i)) + (lambda/2) |w|^2 + (1/N) b.w

Data: N = 2000 rows, k = 5 columns; column 0 is a constant 1 (intercept),
the other columns are uniform on [0, 1]; labels y in {-1, +1} are drawn from
a known logistic model. The linear term b (objective perturbation) is a fixed
random vector of norm 3. Each case is solved with scipy's trust-exact method
(exact gradient and Hessian) to a gradient norm of 1e-12 or less.

Usage (needs numpy and scipy): python3 make_reference.py > reference.json
"""

import json
import sys

import numpy as np
from scipy.optimize import minimize

N, K = 2000, 5
SEED = 20261122


def objective(X, y, lam, b):
    n = X.shape[0]
    lin = np.zeros(X.shape[1]) if b is None else b

    def value(w):
        m = y * (X @ w)
        return np.logaddexp(0.0, -m).sum() / n + 0.5 * lam * w @ w + lin @ w / n

    def grad(w):
        m = y * (X @ w)
        coef = -y * np.exp(-np.logaddexp(0.0, m))  # -y * sigmoid(-m)
        return X.T @ coef / n + lam * w + lin / n

    def hess(w):
        s = np.exp(-np.logaddexp(0.0, -(X @ w)))  # sigmoid
        d = s * (1.0 - s)
        return (X.T * d) @ X / n + lam * np.eye(X.shape[1])

    return value, grad, hess


def main():
    rng = np.random.default_rng(SEED)
    X = rng.uniform(0.0, 1.0, size=(N, K))
    X[:, 0] = 1.0
    w_true = np.array([-1.0, 2.0, -1.5, 0.5, 1.0])
    p = 1.0 / (1.0 + np.exp(-(X @ w_true)))
    y = np.where(rng.uniform(size=N) < p, 1.0, -1.0)
    b = rng.normal(size=K)
    b *= 3.0 / np.linalg.norm(b)

    cases = []
    for lam in (1e-2, 1e-4):
        for lin in (None, b):
            value, grad, hess = objective(X, y, lam, lin)
            res = minimize(value, np.zeros(K), jac=grad, hess=hess,
                           method="trust-exact", options={"gtol": 1e-12, "maxiter": 1000})
            # Polish with plain Newton steps: trust-exact may stop a hair early.
            w = res.x
            for _ in range(5):
                w = w - np.linalg.solve(hess(w), grad(w))
            gnorm = float(np.linalg.norm(grad(w)))
            if gnorm > 1e-12:
                sys.exit(f"reference solve did not converge: lambda={lam}, |grad|={gnorm}")
            cases.append({
                "lambda": lam,
                "linear": None if lin is None else lin.tolist(),
                "weights": w.tolist(),
                "value": float(value(w)),
                "gradient_norm": gnorm,
            })

    json.dump({
        "generator": "learn/testdata/make_reference.py",
        "numpy": np.__version__,
        "seed": SEED,
        "rows": N,
        "columns": K,
        "x": X.tolist(),
        "y": y.tolist(),
        "cases": cases,
    }, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
