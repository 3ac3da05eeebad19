// The RAG serving benchmark (bench/rag/): workload, model configs, backends, engine, metrics.
#pragma once

#include "backend.hpp"
#include "budget.hpp"
#include "cpu_backend.hpp"
#include "engine.hpp"
#include "metrics.hpp"
#include "model_config.hpp"
#include "modes.hpp"
#include "random.hpp"
#include "workload.hpp"
