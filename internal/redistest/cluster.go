package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster limits.
const (
	clusterSlots   = 16384
	clusterTimeout = 30 * time.Second // from CLUSTER MEET to every node ok
	// failoverTimeout bounds a failover: on a loaded machine an election can
	// fail for want of votes in time, and the next comes 8 s later.
	failoverTimeout = 90 * time.Second
	// electionGrace is how long a replica may try to win an election before
	// WaitFailover makes it take over without one: Redis' elections
	// sometimes never gather a majority (redis/redis#6424 shows the same
	// endless "Waiting for votes" seen here on a shared machine).
	electionGrace = 15 * time.Second
	minMasters    = 3 // fewer masters is not a Redis Cluster
)

// Cluster is a Redis Cluster started by [StartCluster] (masters only) or
// [StartReplicatedCluster] (one replica per master).
type Cluster struct {
	nodes    []*Server // masters, in slot order
	replicas []*Server // replicas[i] replicates nodes[i]; empty without replicas
}

// StartCluster starts masters (at least 3) redis-server processes in
// cluster mode, each on free ports in its own temporary directory, gives
// each an even share of the 16384 hash slots, joins them, and returns once
// every node reports cluster_state:ok and sees every other node connected.
// It stops the nodes in t.Cleanup. It skips or fails the test as [Start]
// does when redis-server is missing, and fails it if the cluster does not
// form within 30 seconds.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < minMasters {
		t.Fatalf("redistest: StartCluster needs at least %d masters, got %d", minMasters, masters)
	}
	c := &Cluster{nodes: make([]*Server, masters)}
	for i := range c.nodes {
		c.nodes[i] = start(t, nil, true, "")
	}
	c.assignAndMeet(t)
	c.waitReady(t)
	return c
}

// StartReplicatedCluster starts a Redis Cluster as [StartCluster] does, with
// one replica for each master (so 2×masters processes), and returns once
// every node reports cluster_state:ok, sees every other node connected, and
// every replica has completed its first sync with its master. A master
// killed with [Server.Kill] is replaced by its replica after the cluster
// node timeout (2 seconds) and an election; [Cluster.WaitFailover] waits for
// that.
func StartReplicatedCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < minMasters {
		t.Fatalf("redistest: StartReplicatedCluster needs at least %d masters, got %d", minMasters, masters)
	}
	c := &Cluster{nodes: make([]*Server, masters), replicas: make([]*Server, masters)}
	// A replica's first sync starts at once, not after the default 5 s of
	// waiting for other replicas to share the transfer; and a replica always
	// stands for election when its master fails, however long ago it last
	// heard from it (a loaded machine must not keep a failover from
	// happening).
	args := []string{"--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0"}
	for i := range c.nodes {
		c.nodes[i] = start(t, args, true, "")
	}
	for i := range c.replicas {
		c.replicas[i] = start(t, args, true, "")
	}
	c.assignAndMeet(t)
	deadline := time.Now().Add(clusterTimeout)
	for i, r := range c.replicas {
		id, err := c.nodes[i].Do("CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: node %s: CLUSTER MYID: %v", c.nodes[i].Addr(), err)
		}
		// The replica must have learnt of its master through gossip first.
		for {
			_, err = r.Do("CLUSTER", "REPLICATE", id)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: node %s: CLUSTER REPLICATE %s: %v", r.Addr(), id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	c.waitReady(t)
	return c
}

// all returns every node, masters first.
func (c *Cluster) all() []*Server {
	return append(append([]*Server(nil), c.nodes...), c.replicas...)
}

// assignAndMeet gives each master its share of the slots and introduces
// every other node to the first.
func (c *Cluster) assignAndMeet(t testing.TB) {
	t.Helper()
	masters := len(c.nodes)
	for i, n := range c.nodes {
		first, last := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		if _, err := n.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			t.Fatalf("redistest: node %s: CLUSTER ADDSLOTSRANGE %d %d: %v", n.Addr(), first, last, err)
		}
	}
	for _, n := range c.all()[1:] {
		_, err := c.nodes[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port), strconv.Itoa(n.busPort))
		if err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", n.Addr(), err)
		}
	}
}

// waitReady waits until ready holds, failing the test after clusterTimeout.
func (c *Cluster) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		err := c.ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster of %d nodes did not form within %v: %v", len(c.all()), clusterTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready reports nil once every node says cluster_state:ok and lists all
// nodes as connected, past the handshake and not failing, and every replica
// has a live link to its master.
func (c *Cluster) ready() error {
	all := c.all()
	for _, r := range c.replicas {
		info, err := r.Do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("node %s: INFO replication: %w", r.Addr(), err)
		}
		if !strings.Contains(info, "master_link_status:up\r\n") {
			return fmt.Errorf("replica %s: link to its master is not up", r.Addr())
		}
	}
	for _, n := range all {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("node %s: CLUSTER INFO: %w", n.Addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok\r\n") {
			return fmt.Errorf("node %s: cluster_state is not ok", n.Addr())
		}
		nodes, err := n.Do("CLUSTER", "NODES")
		if err != nil {
			return fmt.Errorf("node %s: CLUSTER NODES: %w", n.Addr(), err)
		}
		lines := strings.Split(strings.TrimSpace(nodes), "\n")
		if len(lines) != len(all) {
			return fmt.Errorf("node %s knows %d of %d nodes", n.Addr(), len(lines), len(all))
		}
		for _, line := range lines {
			// <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <epoch> <link-state> <slot>...
			f := strings.Fields(line)
			if len(f) < 8 || f[7] != "connected" ||
				strings.Contains(f[2], "handshake") || strings.Contains(f[2], "fail") || strings.Contains(f[2], "noaddr") {
				return fmt.Errorf("node %s sees %q", n.Addr(), line)
			}
		}
	}
	return nil
}

// Addrs returns the masters' addresses, "127.0.0.1:port", in node order
// (replicas are not listed: clients find them through the cluster). The
// slice is a copy the caller may change.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Node returns node i, 0 <= i < the number of masters, for Do, Stop and
// Restart on one node. Node i serves slots i*16384/n to (i+1)*16384/n-1. It
// panics if i is out of range, like a slice index.
func (c *Cluster) Node(i int) *Server {
	return c.nodes[i]
}

// Replica returns the replica started for master i by
// [StartReplicatedCluster], 0 <= i < the number of masters. It panics if i is
// out of range or the cluster has no replicas.
func (c *Cluster) Replica(i int) *Server {
	return c.replicas[i]
}

// NodeOf returns the index of the master that serves key's slot, asking the
// cluster (CLUSTER KEYSLOT) through any live master.
func (c *Cluster) NodeOf(key string) (int, error) {
	var last error
	for _, n := range c.nodes {
		reply, err := n.Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			last = err
			continue
		}
		slot, err := strconv.Atoi(reply)
		if err != nil {
			return 0, fmt.Errorf("CLUSTER KEYSLOT %q answered %q", key, reply)
		}
		return slot * len(c.nodes) / clusterSlots, nil
	}
	return 0, fmt.Errorf("CLUSTER KEYSLOT %q: no node answered: %w", key, last)
}

// WaitFailover waits until the replica of master i has taken over: it
// reports itself a master and the cluster is ok again. A replica that has
// not won its election within 15 seconds is made to take over without one
// (CLUSTER FAILOVER TAKEOVER, as an operator would): either way the slots
// move to the replica with what it had replicated. It returns an error if
// the takeover does not happen within 90 seconds.
func (c *Cluster) WaitFailover(i int) error {
	r := c.replicas[i]
	start := time.Now()
	deadline := start.Add(failoverTimeout)
	forced := false
	for {
		if !forced && time.Since(start) > electionGrace {
			forced = true
			if _, err := r.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
				return fmt.Errorf("replica %s of master %d: CLUSTER FAILOVER TAKEOVER: %w", r.Addr(), i, err)
			}
		}
		role, err := r.Do("ROLE")
		if err == nil && strings.HasPrefix(role, "master\n") {
			info, err := r.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok\r\n") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s did not take over from master %d within %v (ROLE: %q, %v)", r.Addr(), i, failoverTimeout, role, err)
		}
		time.Sleep(pollInterval)
	}
}

// CatchUpReplica pauses writes on master i (CLIENT PAUSE WRITE, for at most
// pause) and waits until its replica has received everything the master
// wrote, as Redis's own FAILOVER does before handing over: a test that kills
// the master right after loses no write it acknowledged to replication lag,
// so what it measures is the clients' behaviour, not the lag. Clients'
// writes wait meanwhile and fail when the master dies. It returns an error
// if the replica does not catch up within the pause.
func (c *Cluster) CatchUpReplica(i int, pause time.Duration) error {
	m, r := c.nodes[i], c.replicas[i]
	if _, err := m.Do("CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "WRITE"); err != nil {
		return fmt.Errorf("CLIENT PAUSE on master %d: %w", i, err)
	}
	deadline := time.Now().Add(pause)
	for {
		want, err := replOffset(m)
		if err != nil {
			return fmt.Errorf("master %d: %w", i, err)
		}
		got, err := replOffset(r)
		if err == nil && got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s of master %d at replication offset %d, master at %d, after %v (%v)", r.Addr(), i, got, want, pause, err)
		}
		time.Sleep(pollInterval)
	}
}

// replOffset is a server's master_repl_offset (INFO replication): for a
// master what it has written to its replication stream, for a replica what
// it has received of its master's.
func replOffset(s *Server) (int64, error) {
	info, err := s.Do("INFO", "replication")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO replication has no master_repl_offset: %q", info)
}

// Stop stops every node now. Stopping a stopped cluster does nothing.
func (c *Cluster) Stop() {
	for _, n := range c.all() {
		n.Stop()
	}
}
