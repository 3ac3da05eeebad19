// Umbrella header for the position-free KV store: keys, handles, the store and its
// bookkeeping, layouts, plans and the plan algebra.
#pragma once

#include "lazyattn/kv/bookkeeping.hpp"
#include "lazyattn/kv/checks.hpp"
#include "lazyattn/kv/doc_key.hpp"
#include "lazyattn/kv/layout.hpp"
#include "lazyattn/kv/plan.hpp"
#include "lazyattn/kv/plan_ops.hpp"
#include "lazyattn/kv/store.hpp"
#include "lazyattn/kv/types.hpp"
