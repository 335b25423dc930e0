// Package chaos holds Hearth's leadership fault tests. They run the real
// binary (cmd/app) as separate processes against a throwaway Postgres of
// their own, and inject the faults leadership must survive: a leader
// killed (SIGKILL) or stopped (SIGTERM), a lock session terminated
// (pg_terminate_backend), a leader frozen and thawed (SIGSTOP/SIGCONT),
// and Postgres restarted (pg_ctl restart -m fast and -m immediate).
//
// TestChaos runs three workers, which share the three projections (each
// projection has its own lock and term; each worker leads one), an api
// process and a writer issuing commands for every projection through the
// HTTP API; every round injects one fault aimed at one projection, in
// turn, and waits for every projection it hit to be taken over and for the
// workers to share the projections fairly again (a replacement worker
// takes its share without a restart). The end checks that every event was
// applied exactly once (every row at its stream's last version, each order
// equal to the fold of its events; exactly one change-log row per event)
// and prints the takeover times per fault and projection. `make test` runs
// one round of each fault; `make chaos` runs 24, so that each fault hits
// each projection (go test ./internal/chaos -run Chaos -chaos.rounds=24 -v).
//
// TestFrozenLeaderWritesNothing freezes the leader of orders while a
// projection write of its own is pending and proves that the write never
// commits.
//
// TestPlanLeaderKilledMidRun kills the leader of the visit generator
// (hearth/plans) with SIGKILL in the middle of its run over many service
// plans, three times, each once the ledger shows it creating visits, and
// checks that every visit of every plan has exactly one order and that no
// staff member is booked twice.
//
// The tests restart the whole cluster, so they live in a package of their
// own (one cluster per test binary) and never run in parallel.
package chaos
