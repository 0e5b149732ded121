package coord

import (
	"encoding/json"
	"fmt"
	"github.com/distash/distash/internal/authz"
	"maps"
	"slices"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// Node classes.
const (
	ClassTransaction = "transaction" // hosts log replicas and the stateless roles
	ClassStash       = "stash"       // hosts one stash of one pool
)

// NodeInfo is a registered node of the cluster.
type NodeInfo struct {
	ID      string `json:"id"`
	Addr    string `json:"addr"`
	Class   string `json:"class"`
	Pool    string `json:"pool,omitempty"` // stash nodes only
	DC      string `json:"dc,omitempty"`
	Zone    string `json:"zone,omitempty"`
	Machine string `json:"machine,omitempty"`
	// LogID is a transaction node's log replica's raft server id, as it
	// registered: it changes when the node's log directory is lost ("" from
	// a node that does not say: its id is then the node id).
	LogID string `json:"log_id,omitempty"`
	// Incarnation is what the node process that registered last chose
	// when it started ("" from a node that does not say): a registration
	// from the same incarnation is that process again, a retry.
	Incarnation string `json:"incarnation,omitempty"`
}

// LogRaftID returns the raft server id node n's log replica registered
// with: n.LogID, or the node id.
func (n NodeInfo) LogRaftID() string {
	if n.LogID != "" {
		return n.LogID
	}
	return n.ID
}

// Roles is the role assignment of one generation: node ids.
type Roles struct {
	Controller    string   `json:"controller"` // the coordinator address that started the generation
	Sequencer     string   `json:"sequencer,omitempty"`
	GRVProxies    []string `json:"grv_proxies,omitempty"`
	CommitProxies []string `json:"commit_proxies,omitempty"`
	Resolver      string   `json:"resolver,omitempty"`
	LogReplicas   []string `json:"log_replicas,omitempty"`
	// LogIDs are the log replicas' raft server ids, parallel to
	// LogReplicas (nil in a state from before: the node ids).
	LogIDs []string `json:"log_ids,omitempty"`
}

func (r Roles) clone() Roles {
	r.GRVProxies = slices.Clone(r.GRVProxies)
	r.CommitProxies = slices.Clone(r.CommitProxies)
	r.LogReplicas = slices.Clone(r.LogReplicas)
	r.LogIDs = slices.Clone(r.LogIDs)
	return r
}

// LogID returns the raft server id of log replica i (LogReplicas[i]).
func (r Roles) LogID(i int) string {
	if i < len(r.LogIDs) && r.LogIDs[i] != "" {
		return r.LogIDs[i]
	}
	return r.LogReplicas[i]
}

// State is the replicated cluster state. The zero State is a cluster that
// has no configuration yet.
type State struct {
	Config     string              `json:"config,omitempty"` // TOML, as first written
	Generation uint64              `json:"generation"`
	Nodes      map[string]NodeInfo `json:"nodes,omitempty"` // by id
	Roles      Roles               `json:"roles"`           // of Generation
	// Tags holds, per pool, its stash slots: the id of the stash node
	// holding each, "" for a free slot. A pool starts with the config's
	// stashes count of slots and grows by one when a stash node joins and
	// finds none free (up to config.MaxStashesPerPool). A returning node
	// keeps its slot.
	Tags map[string][]string `json:"tags,omitempty"`
	// SlotTags holds, per pool, each slot's tag (parallel to Tags): the
	// stash's identity in the shard map and the log. A new configuration
	// numbers them as StashTags does (from 1, in the pools'
	// order); a slot gets a fresh tag (NextTag) when its tag is retired, or
	// when a stash that starts empty would otherwise take a tag that
	// already served (see RegisterStash).
	SlotTags map[string][]uint32 `json:"slot_tags,omitempty"`
	// NextTag is one above the highest tag ever given.
	NextTag uint32 `json:"next_tag,omitempty"`
	// UsedTags are the tags a stash node ever registered on (sorted): such
	// a tag may be in the shard map with data behind it.
	UsedTags []uint32 `json:"used_tags,omitempty"`
	// Retired are the tags that will never serve again (sorted): the data
	// distributor retired them once no shard referred to them, or their
	// stash came back empty, or an operator declared it failed
	// (ExcludeFailed). Their slots' next stash gets a fresh tag.
	Retired []uint32 `json:"retired,omitempty"`
	// RetiredAt is, for a retired tag, the address of the stash node that
	// held it when it was retired (none for a tag retired before this was
	// recorded, or by a slot no node held).
	RetiredAt map[uint32]string `json:"retired_at,omitempty"`
	// GivenUp are retired tags whose data an operator gave up (sorted;
	// ExcludeFailed): a durable shard left with only retired replicas, one
	// of them given up, starts empty instead of waiting.
	GivenUp []uint32 `json:"given_up,omitempty"`
	// Excluded are the addresses ("host:port", sorted) whose stashes the
	// data distributor empties (Exclude, Include).
	Excluded []string `json:"excluded,omitempty"`
	// Failed are the excluded addresses an operator declared failed
	// (ExcludeFailed), sorted.
	Failed []string `json:"failed,omitempty"`
	// FailureWaitMs overrides the configuration's cluster.failure_wait, in
	// milliseconds; nil: the configuration's.
	FailureWaitMs *int64 `json:"failure_wait_ms,omitempty"`
	// Replication overrides, per pool, the configuration's replication.
	Replication map[string]int `json:"replication,omitempty"`
	// Recovery is the last claim of the stateless roles, while the node
	// that claimed them holds them; nil before the first claim.
	Recovery *Recovery `json:"recovery,omitempty"`
	// LogBootstrap are the raft ids the log was formed with (a generation
	// placing log replicas where there were none, or Recover): a replica
	// with one of them and no raft state bootstraps the log's raft with
	// the placement; any other joins, once the log's leader added it.
	LogBootstrap []string `json:"log_bootstrap,omitempty"`
	// Grants are the cluster's roles ([auth]) once changed live (AuthSet;
	// OpAuth); before that, the configuration's (AuthRoles).
	Grants  []authz.Role `json:"auth_roles,omitempty"`
	AuthSet bool         `json:"auth_set,omitempty"`
}

// Recovery is a claim of the stateless roles (see Claim) and how long the
// claimer's recovery took.
type Recovery struct {
	Generation    uint64 `json:"generation"` // the generation the claim started
	Node          string `json:"node"`       // the claimer
	ClaimedUnixMs int64  `json:"claimed_unix_ms"`
	// Micros is the recovery's duration as the claimer reported it
	// (RecoveryDone); 0 until it does.
	Micros int64 `json:"micros,omitempty"`
}

// Clone returns a deep copy: readers get a snapshot the FSM will not change.
func (s *State) Clone() *State {
	c := *s
	c.Nodes = maps.Clone(s.Nodes)
	c.Roles = s.Roles.clone()
	if s.Recovery != nil {
		r := *s.Recovery
		c.Recovery = &r
	}
	c.Tags = make(map[string][]string, len(s.Tags))
	for p, t := range s.Tags {
		c.Tags[p] = slices.Clone(t)
	}
	if s.SlotTags != nil {
		c.SlotTags = make(map[string][]uint32, len(s.SlotTags))
		for p, t := range s.SlotTags {
			c.SlotTags[p] = slices.Clone(t)
		}
	}
	c.UsedTags = slices.Clone(s.UsedTags)
	c.LogBootstrap = slices.Clone(s.LogBootstrap)
	c.Retired = slices.Clone(s.Retired)
	c.RetiredAt = maps.Clone(s.RetiredAt)
	c.GivenUp = slices.Clone(s.GivenUp)
	c.Excluded = slices.Clone(s.Excluded)
	c.Failed = slices.Clone(s.Failed)
	if s.FailureWaitMs != nil {
		v := *s.FailureWaitMs
		c.FailureWaitMs = &v
	}
	c.Replication = maps.Clone(s.Replication)
	if s.Grants != nil {
		c.Grants = cloneRoles(s.Grants)
	}
	return &c
}

// SlotTag returns the tag of slot i of pool, 0 if there is no such slot.
func (s *State) SlotTag(pool string, i int) uint32 {
	if t := s.SlotTags[pool]; i >= 0 && i < len(t) {
		return t[i]
	}
	return 0
}

// TagUsed reports whether a stash node ever registered on tag.
func (s *State) TagUsed(tag uint32) bool {
	_, ok := slices.BinarySearch(s.UsedTags, tag)
	return ok
}

// TagRetired reports whether tag was retired.
func (s *State) TagRetired(tag uint32) bool {
	_, ok := slices.BinarySearch(s.Retired, tag)
	return ok
}

// TagGivenUp reports whether an operator gave up tag's data (ExcludeFailed).
func (s *State) TagGivenUp(tag uint32) bool {
	_, ok := slices.BinarySearch(s.GivenUp, tag)
	return ok
}

// IsExcluded reports whether addr is excluded.
func (s *State) IsExcluded(addr string) bool {
	_, ok := slices.BinarySearch(s.Excluded, addr)
	return ok
}

// FailureWait returns the failure_wait in force: the override, else cfg's
// (0 if cfg is nil).
func (s *State) FailureWait(cfg *config.Config) time.Duration {
	if s.FailureWaitMs != nil {
		return time.Duration(*s.FailureWaitMs) * time.Millisecond
	}
	if cfg == nil {
		return 0
	}
	return cfg.Cluster.FailureWait.Duration
}

// PoolReplication returns the replication in force for pool: the override,
// else cfg's (0 for a pool cfg does not have).
func (s *State) PoolReplication(cfg *config.Config, pool string) int {
	if r, ok := s.Replication[pool]; ok {
		return r
	}
	if cfg != nil {
		for _, p := range cfg.Pools {
			if p.Name == pool {
				return p.Replication
			}
		}
	}
	return 0
}

// insertSorted adds v to the sorted set xs.
func insertSorted[T interface{ ~uint32 | ~string }](xs []T, v T) []T {
	i, ok := slices.BinarySearch(xs, v)
	if ok {
		return xs
	}
	return slices.Insert(xs, i, v)
}

// freshTag gives out a tag never given before.
func (s *State) freshTag() uint32 {
	t := s.NextTag
	s.NextTag++
	return t
}

// StashTags returns, per pool of cfg, the tags of its stash slots: tags
// are numbered from shardmap.SystemTag+1 in the configuration's pool order, one per
// slot (a pool's `stashes`). Embedded clusters and multi-process clusters
// number them alike, so a stash process's tag follows from its pool and
// the slot the cluster controller gave it.
func StashTags(cfg *config.Config) map[string][]kv.Tag {
	out := make(map[string][]kv.Tag, len(cfg.Pools))
	next := shardmap.SystemTag + 1
	for _, p := range cfg.Pools {
		for i := 0; i < p.Stashes; i++ {
			out[p.Name] = append(out[p.Name], next)
			next++
		}
	}
	return out
}

// deriveTags fills SlotTags, NextTag and UsedTags of a state encoded
// before they existed (versions 1 and 2): the slots' tags are then the
// configuration's numbering (StashTags), and the tags of the
// slots a node holds are the ones known to have served. A state that has
// them, or no configuration, is left as it is.
func (s *State) deriveTags() error {
	if s.SlotTags != nil || s.Config == "" {
		return nil
	}
	cfg, err := s.ParsedConfig()
	if err != nil {
		return fmt.Errorf("coord: stored configuration: %w", err)
	}
	s.SlotTags = make(map[string][]uint32, len(cfg.Pools))
	s.NextTag = uint32(shardmap.SystemTag) + 1
	for p, tags := range StashTags(cfg) {
		for i, t := range tags {
			s.SlotTags[p] = append(s.SlotTags[p], uint32(t))
			s.NextTag = max(s.NextTag, uint32(t)+1)
			if held := s.Tags[p]; i < len(held) && held[i] != "" {
				s.UsedTags = insertSorted(s.UsedTags, uint32(t))
			}
		}
	}
	return nil
}

// Slot returns the tag slot of pool held by node id, or -1.
func (s *State) Slot(pool, id string) int {
	return slices.Index(s.Tags[pool], id)
}

// ParsedConfig parses the stored configuration (nil, nil if none yet).
func (s *State) ParsedConfig() (*config.Config, error) {
	if s.Config == "" {
		return nil, nil
	}
	return config.Parse([]byte(s.Config))
}

// Encoding versions: bump when a change is not backward compatible, and
// keep decoding the old ones. Version 2 added the claim and recovery_done
// commands and State.Recovery: version 1 encodings decode as they are, and
// a binary that knows only version 1 refuses version 2 rather than
// dropping what it does not know. Version 3 added the slots' own tags
// (State.SlotTags, NextTag, UsedTags, Retired), pools that grow, empty
// registrations, exclusions and live settings (exclude, include,
// configure, retire): a version 1 or 2 state gets the configuration's tag
// numbering (deriveTags), and a version 1 or 2 registration applies as it
// did then (no fresh tags, no growth), so a replayed old log gives the
// state it gave. Version 4 added the log replicas' raft ids (Roles.LogIDs,
// NodeInfo.LogID) and set_log_replicas: an older state has none (the node
// ids stand for them). Version 5 added the registering process's
// incarnation (NodeInfo.Incarnation), which changes how a registration
// applies: a binary that knows only version 4 would give a retried
// registration of an empty stash a fresh tag where this one keeps it, and
// replicas of one log must apply it alike, so it refuses version 5. In
// version 5 a registration from an earlier incarnation than the node's
// last registered one (a killed process's, applied late) is refused too.
const (
	commandVersion  = 5
	snapshotVersion = 5
)

type snapshotEnvelope struct {
	V     int    `json:"v"`
	State *State `json:"state"`
}

// EncodeState returns the versioned encoding of s (raft snapshots).
func EncodeState(s *State) ([]byte, error) {
	return json.Marshal(snapshotEnvelope{V: snapshotVersion, State: s})
}

// DecodeState decodes what EncodeState wrote.
func DecodeState(b []byte) (*State, error) {
	var e snapshotEnvelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("coord: decode state: %w", err)
	}
	if e.V < 1 || e.V > snapshotVersion || e.State == nil {
		return nil, fmt.Errorf("coord: state encoding version %d, want 1 to %d", e.V, snapshotVersion)
	}
	if err := e.State.deriveTags(); err != nil {
		return nil, err
	}
	return e.State, nil
}
