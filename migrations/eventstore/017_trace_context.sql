-- Tracing (issue 23): the trace context of the projection step that
-- queued a webhook delivery (a W3C traceparent), so that the delivery's
-- span, made later by the dispatcher, joins the trace of the write that
-- caused it. NULL when tracing is off.
ALTER TABLE webhook_deliveries ADD COLUMN trace_parent text;
