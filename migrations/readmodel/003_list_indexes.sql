-- GET /v1/orders?settlement_status=...: without this index, the count of a
-- large merchant's settled (or unsettled) orders is a sequential scan of the
-- whole table (docs/query-plans.md; adapters/readmodel/plans_test.go).
CREATE INDEX orders_merchant_settlement ON orders (merchant_id, settlement_status, created_at DESC, id DESC);
