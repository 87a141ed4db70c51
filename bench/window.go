package main

import (
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU reads the first line of /proc/stat: busy and total jiffies of
// all CPUs (busy excludes idle and iowait).
func machineCPU() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// redisCPU is redis-server's CPU time so far (used_cpu_user + used_cpu_sys):
// the whole process's, its threads included.
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// meter counts the operations that complete while its window is open, with
// their latencies, and what the window cost: this process's CPU,
// redis-server's, and how busy the whole machine was.
type meter struct {
	counting  atomic.Bool
	completed atomic.Int64
	mu        sync.Mutex
	lat       latencies

	elapsed, cpu, redisCPU time.Duration // redisCPU: every redis-server process of the servers
	redisByRole            map[string]time.Duration
	machineBusy            float64 // percent of all CPUs
	// heap is what this process allocated in the window and the CPU its
	// garbage collector spent; steadier between runs than CPU time, which
	// moves with the VM.
	heap heapUse
}

// heapUse is the process's heap allocation and GC CPU so far.
type heapUse struct {
	bytes, objects uint64
	gcCPU          time.Duration
}

var heapMetrics = []string{"/gc/heap/allocs:bytes", "/gc/heap/allocs:objects", "/cpu/classes/gc/total:cpu-seconds"}

func readHeap() heapUse {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	var h heapUse
	if s[0].Value.Kind() == metrics.KindUint64 {
		h.bytes = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		h.objects = s[1].Value.Uint64()
	}
	if s[2].Value.Kind() == metrics.KindFloat64 {
		h.gcCPU = time.Duration(s[2].Value.Float64() * float64(time.Second))
	}
	return h
}

func (h heapUse) minus(o heapUse) heapUse {
	return heapUse{bytes: h.bytes - o.bytes, objects: h.objects - o.objects, gcCPU: h.gcCPU - o.gcCPU}
}

// done records an operation that took d, when the window is open.
func (m *meter) done(d time.Duration) {
	if !m.counting.Load() {
		return
	}
	m.completed.Add(1)
	m.mu.Lock()
	m.lat = append(m.lat, d)
	m.mu.Unlock()
}

// measure opens the window for d, then closes it.
func (m *meter) measure(ctx context.Context, srv *servers, d time.Duration) error {
	redis0, err := srv.redisCPU(ctx)
	if err != nil {
		progress("redis-server CPU before the window: %v", err)
	}
	cpu0 := processCPU()
	heap0 := readHeap()
	busy0, total0 := machineCPU()
	m.counting.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	m.counting.Store(false)
	m.elapsed = time.Since(t0)
	m.cpu = processCPU() - cpu0
	m.heap = readHeap().minus(heap0)
	busy1, total1 := machineCPU()
	if total1 > total0 {
		m.machineBusy = 100 * float64(busy1-busy0) / float64(total1-total0)
	}
	redis1, err := srv.redisCPU(ctx)
	if err != nil {
		progress("redis-server CPU after the window: %v", err)
	}
	m.redisByRole = map[string]time.Duration{}
	for role, t := range redis1 {
		if t0, ok := redis0[role]; ok { // both readings answered
			m.redisByRole[role] = t - t0
			m.redisCPU += t - t0
		}
	}
	return nil
}

// perOp is the window's CPU per completed operation: this process's and
// redis-server's (zero when none completed).
func (m *meter) perOp() (process, redis time.Duration) {
	n := m.completed.Load()
	if n == 0 {
		return 0, 0
	}
	return (m.cpu / time.Duration(n)).Round(time.Microsecond), (m.redisCPU / time.Duration(n)).Round(time.Microsecond)
}

// heapPerOp describes the window's allocation per completed operation and
// the share of the process's CPU its garbage collector took.
func (m *meter) heapPerOp() string {
	n := m.completed.Load()
	if n == 0 || m.cpu == 0 {
		return ""
	}
	return fmt.Sprintf("allocated per attempt in this process: %.1f KiB in %d objects; garbage collection %.0f%% of its CPU",
		float64(m.heap.bytes)/float64(n)/1024, m.heap.objects/uint64(n), 100*m.heap.gcCPU.Seconds()/m.cpu.Seconds())
}

// latencies returns what done recorded; call it once the window is closed.
func (m *meter) latencies() latencies {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lat
}
