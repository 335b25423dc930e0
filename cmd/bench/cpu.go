package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on
// Linux, whatever the kernel's HZ).
const clockTicks = 100

// cpuSample is the CPU time (user + system, in clock ticks) used so far by
// one process (a Hearth process, or pgbench), by this bench, and by the
// whole machine.
type cpuSample struct{ process, bench, machine int64 }

// cpuNow samples /proc. The rest of the machine, besides the process and
// the bench, is Postgres: nothing else runs during a measurement.
func cpuNow(pid int) cpuSample {
	s := cpuSample{process: cpuTicks(strconv.Itoa(pid)), bench: cpuTicks("self")}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		// cpu  user nice system idle iowait irq softirq steal ...
		line, _, _ := strings.Cut(string(data), "\n")
		for i, f := range strings.Fields(line) {
			if n, err := strconv.ParseInt(f, 10, 64); err == nil && i != 4 && i != 5 && i <= 7 {
				s.machine += n
			}
		}
	}
	return s
}

// cpuTicks is utime + stime of /proc/<pid>/stat; 0 when it cannot be read.
func cpuTicks(pid string) int64 {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which sits in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15.
	_, rest, ok := strings.Cut(string(data), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

// cpuSpent is the CPU (clock ticks) each party spent between two samples:
// the process (Hearth, or pgbench), Postgres (the rest of the machine) and
// the bench (the load generator).
type cpuSpent struct{ process, postgres, bench int64 }

func (s cpuSample) since(before cpuSample) cpuSpent {
	process, bench := s.process-before.process, s.bench-before.bench
	return cpuSpent{process, s.machine - before.machine - process - bench, bench}
}

func (c cpuSpent) add(o cpuSpent) cpuSpent {
	return cpuSpent{c.process + o.process, c.postgres + o.postgres, c.bench + o.bench}
}

// cpuPerRequest is cpuSpent per request, in microseconds.
type cpuPerRequest struct{ process, postgres, bench float64 }

func (c cpuSpent) per(requests float64) cpuPerRequest {
	if requests == 0 {
		return cpuPerRequest{}
	}
	us := func(ticks int64) float64 { return float64(ticks) * 1e6 / clockTicks / requests }
	return cpuPerRequest{us(c.process), us(c.postgres), us(c.bench)}
}

func (c cpuPerRequest) String() string {
	return fmt.Sprintf("Hearth %.0f µs, Postgres %.0f µs, load generator %.0f µs", c.process, c.postgres, c.bench)
}

// contender is one of two Hearth processes measured in turns (alternate):
// where it listens, its pid, and what its turns gave.
type contender struct {
	base  string
	pid   int
	total postResult
	turns []string // Hearth's µs per request, by turn
}

// alternate sends request (a POST /v1/orders) to x and y in turns, from
// concurrency clients, for rounds rounds of a turn each (which one goes
// first alternates), after a half turn each that is not counted
// (connections, caches), so that both see the same machine.
func (b *bench) alternate(what string, request []byte, rounds int, turn time.Duration, x, y *contender) {
	b.progress("%s: a turn of %s for each process first, not counted", what, turn/2)
	postOrders(x.base, x.pid, request, turn/2, concurrency, 0)
	postOrders(y.base, y.pid, request, turn/2, concurrency, 0)
	for round := range rounds {
		b.progress("%s, round %d of %d: POST /v1/orders to each process, %d clients for %s each", what, round+1, rounds, concurrency, turn)
		for i := range 2 {
			c := x
			if (round+i)%2 == 1 {
				c = y
			}
			r := postOrders(c.base, c.pid, request, turn, concurrency, 0)
			c.total.add(r)
			c.turns = append(c.turns, fmt.Sprintf("%.0f", r.cpu.per(float64(len(r.lat))).process))
		}
	}
}
