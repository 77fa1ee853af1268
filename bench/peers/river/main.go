// riverpeer: River on tickwheel's hot second, driven by `tickwheel bench peers`
// (bench/peers/systems.py). One binary, three subcommands:
//
//	riverpeer migrate <dsn>
//	riverpeer add <dsn> <jobs> <t0 unix ms>
//	riverpeer work <dsn> <records file> <ready file> <max workers> <fetch cooldown> <fetch poll>
//
// `add` inserts job i = 0..jobs-1 due at T0 with InsertManyFast (COPY), 10,000 per call.
// `work` runs one client on the default queue. Its handler's first act appends a 12-byte
// record, little-endian (uint32 job index, int64 unix microseconds), to an in-memory buffer
// written out every 100 ms and at the end; the harness counts runs by the file's size.
// It writes the ready file once the client has started, and stops gracefully on SIGTERM.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

const addChunk = 10_000

type Noop struct {
	Index uint32 `json:"i"`
}

func (Noop) Kind() string { return "noop" }

// starts collects the handler's records until the flusher writes them out.
type starts struct {
	mu      sync.Mutex
	pending []byte
	out     *os.File
}

func (s *starts) note(index uint32) {
	var rec [12]byte
	binary.LittleEndian.PutUint32(rec[0:4], index)
	binary.LittleEndian.PutUint64(rec[4:12], uint64(time.Now().UnixMicro()))
	s.mu.Lock()
	s.pending = append(s.pending, rec[:]...)
	s.mu.Unlock()
}

func (s *starts) flush() error {
	s.mu.Lock()
	data := s.pending
	s.pending = nil
	s.mu.Unlock()
	if len(data) == 0 {
		return nil
	}
	_, err := s.out.Write(data)
	return err
}

type NoopWorker struct {
	river.WorkerDefaults[Noop]
	starts *starts
}

func (w *NoopWorker) Work(_ context.Context, job *river.Job[Noop]) error {
	w.starts.note(job.Args.Index)
	return nil
}

func check(err error, doing string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "riverpeer: %s: %v\n", doing, err)
		os.Exit(1)
	}
}

func argInt(text, name string) int {
	n, err := strconv.Atoi(text)
	check(err, "reading "+name)
	return n
}

func argDuration(text, name string) time.Duration {
	d, err := time.ParseDuration(text)
	check(err, "reading "+name)
	return d
}

func riverVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/riverqueue/river" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func migrate(ctx context.Context, pool *pgxpool.Pool) {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	check(err, "making the migrator")
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	check(err, "migrating")
}

func add(ctx context.Context, pool *pgxpool.Pool, jobs int, t0 time.Time) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	check(err, "making the inserting client")
	opts := &river.InsertOpts{ScheduledAt: t0}
	for first := 0; first < jobs; first += addChunk {
		batch := make([]river.InsertManyParams, 0, addChunk)
		for i := first; i < min(jobs, first+addChunk); i++ {
			batch = append(batch, river.InsertManyParams{Args: Noop{Index: uint32(i)}, InsertOpts: opts})
		}
		_, err := client.InsertManyFast(ctx, batch)
		check(err, "inserting")
	}
}

func work(ctx context.Context, pool *pgxpool.Pool, args []string) {
	out, err := os.Create(args[0])
	check(err, "creating the records file")
	s := &starts{out: out}
	workers := river.NewWorkers()
	river.AddWorker(workers, &NoopWorker{starts: s})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     argDuration(args[3], "fetch cooldown"),
		FetchPollInterval: argDuration(args[4], "fetch poll"),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: argInt(args[2], "max workers")}},
		Workers:           workers,
	})
	check(err, "making the client")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	check(client.Start(ctx), "starting")
	check(os.WriteFile(args[1], []byte(riverVersion()), 0o644), "writing the ready file")
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for running := true; running; {
		select {
		case <-ticker.C:
			check(s.flush(), "writing records")
		case <-stop:
			running = false
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	check(client.Stop(stopCtx), "stopping")
	check(s.flush(), "writing records")
	check(out.Close(), "closing the records file")
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: riverpeer migrate|add|work <dsn> ...")
		os.Exit(2)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Args[2])
	check(err, "connecting")
	defer pool.Close()
	switch rest := os.Args[3:]; os.Args[1] {
	case "migrate":
		migrate(ctx, pool)
	case "add":
		if len(rest) != 2 {
			check(fmt.Errorf("add needs <jobs> <t0 unix ms>"), "reading arguments")
		}
		add(ctx, pool, argInt(rest[0], "jobs"), time.UnixMilli(int64(argInt(rest[1], "t0"))))
	case "work":
		if len(rest) != 5 {
			check(fmt.Errorf("work needs 5 arguments after the dsn"), "reading arguments")
		}
		work(ctx, pool, rest)
	default:
		check(fmt.Errorf("unknown subcommand %q", os.Args[1]), "reading arguments")
	}
}
