"""An application that uses effectusd for real: a Starlette shop (app.py) that places orders
and submits their checkout saga in one transaction, and two destination services built on the
destination kit (warehouse.py, payments.py). docs/design.md section 11 walks through it."""
