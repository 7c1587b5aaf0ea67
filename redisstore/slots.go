package redisstore

import (
	"strconv"
	"sync"
)

// slotTag returns a short hash tag whose slot is slot, so that a record
// can be named from its slot alone.
func slotTag(slot uint16) string { return slotTags()[slot] }

// slotTags finds, once per process, a tag for every slot: the shortest
// base-36 numbers, tried in order (about 160,000 CRCs, a few ms).
var slotTags = sync.OnceValue(func() *[clusterSlots]string {
	var tags [clusterSlots]string
	for i, left := int64(0), clusterSlots; left > 0; i++ {
		tag := strconv.FormatInt(i, 36)
		if slot := keySlot(tag); tags[slot] == "" {
			tags[slot] = tag
			left--
		}
	}
	return &tags
})
