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
	minMasters     = 3                // fewer masters is not a Redis Cluster
)

// Cluster is a Redis Cluster of masters without replicas, started by
// [StartCluster].
type Cluster struct {
	nodes []*Server
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

	for i, n := range c.nodes {
		first, last := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		if _, err := n.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			t.Fatalf("redistest: node %s: CLUSTER ADDSLOTSRANGE %d %d: %v", n.Addr(), first, last, err)
		}
	}
	for _, n := range c.nodes[1:] {
		_, err := c.nodes[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port), strconv.Itoa(n.busPort))
		if err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", n.Addr(), err)
		}
	}

	deadline := time.Now().Add(clusterTimeout)
	for {
		err := c.ready()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster of %d did not form within %v: %v", masters, clusterTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready reports nil once every node says cluster_state:ok and lists all
// nodes as connected, past the handshake and not failing.
func (c *Cluster) ready() error {
	for _, n := range c.nodes {
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
		if len(lines) != len(c.nodes) {
			return fmt.Errorf("node %s knows %d of %d nodes", n.Addr(), len(lines), len(c.nodes))
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

// Addrs returns the nodes' addresses, "127.0.0.1:port", in node order. The
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

// Stop stops every node now. Stopping a stopped cluster does nothing.
func (c *Cluster) Stop() {
	for _, n := range c.nodes {
		n.Stop()
	}
}
