-- Client.wait: update_saga_state notifies the saga's id on this channel at commit.
LISTEN effectus_saga
