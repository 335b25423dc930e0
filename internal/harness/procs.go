package harness

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Descendants is roots and every process under them, read from /proc: the
// processes a harness signals to freeze or kill a server whole (a
// postmaster and its backends), since a server's children need not share
// its process group.
func Descendants(roots ...int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its ")".
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(fields[1]); err == nil {
				children[ppid] = append(children[ppid], pid)
			}
		}
	}
	var out []int
	seen := map[int]bool{}
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// Running reports whether process pid runs: it exists and has not exited.
// A daemonised server that exited is a zombie until its parent (init, not
// the harness) reaps it, whenever that comes, and signal 0 still reaches
// a zombie: so its state is read from /proc instead.
func Running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, so read after its ")".
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}
