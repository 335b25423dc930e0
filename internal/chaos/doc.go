// Package chaos holds Hearth's leadership fault tests. They run the real
// binary (cmd/app) as separate processes against a throwaway Postgres of
// their own, and inject the faults leadership must survive: the leader
// killed (SIGKILL) or stopped (SIGTERM), its lock session terminated
// (pg_terminate_backend), the leader frozen and thawed (SIGSTOP/SIGCONT),
// and Postgres restarted (pg_ctl restart -m fast and -m immediate).
//
// TestChaos runs three workers, an api process and a writer issuing
// commands through the HTTP API; every round injects one fault, and the
// end checks that every event was applied exactly once (each read-model row
// equals the fold of its events; exactly one change-log row per event) and
// prints the takeover times. `make test` runs one round of each fault;
// `make chaos` runs 24 (go test ./internal/chaos -run Chaos -chaos.rounds=24 -v).
//
// TestFrozenLeaderWritesNothing freezes the leader while a projection write
// of its own is pending and proves that the write never commits.
//
// The tests restart the whole cluster, so they live in a package of their
// own (one cluster per test binary) and never run in parallel.
package chaos
