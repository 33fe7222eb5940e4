"""The checkout saga, built in Python (the same plan as examples/checkout.json, same digest
for the same content): reserve the book, charge the account, schedule the shipping."""

from __future__ import annotations

from effectusd import Plan, compensate, fact, no_compensation, result, step

CHECKOUT = Plan(
    "checkout",
    facts={"order": str, "sku": str, "account_id": str, "amount": int, "currency": str},
    steps=[
        step(
            "reserve",
            "inventory.reserve",
            args={"order": fact("order"), "sku": fact("sku"), "quantity": 1},
            compensate=compensate(
                "inventory.release",
                args={"reservation_id": result("reserve", "/reservation_id")},
            ),
        ),
        step(
            "charge",
            "payments.charge",
            args={
                "order": fact("order"),
                "account_id": fact("account_id"),
                "amount": fact("amount"),
                "currency": fact("currency"),
            },
            compensate=compensate(
                "payments.refund",
                args={
                    "account_id": fact("account_id"),
                    "charge_id": result("charge", "/charge_id"),
                },
            ),
        ),
        step(
            "ship",
            "shipping.schedule",
            args={"order": fact("order"), "reservation_id": result("reserve", "/reservation_id")},
            compensate=no_compensation,
        ),
    ],
)
