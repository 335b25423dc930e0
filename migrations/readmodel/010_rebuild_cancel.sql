-- A cancel asked for through the read models: DELETE
-- /admin/rebuilds/{projection} on an instance that does not run the
-- rebuild (another instance behind the load balancer, or `app rebuild`)
-- sets it on the running rebuild's row, and the rebuild, which reads its
-- row every half second, stops as if cancelled where it runs. A new
-- rebuild's row starts without it. Instances of the previous release
-- neither set it nor read it: a rebuild one of them runs is cancelled
-- on that instance only, as before.
ALTER TABLE rebuilds ADD COLUMN cancel_requested_at timestamptz;
