#include "master/run/evaluator.h"

#include <string>
#include <utility>

#include "master/run/signals.h"

namespace shmtrain::master {

namespace {

nn::Metrics EvaluateOn(const nn::ResolvedModel& model, const float* params,
                       const data::Dataset& val) {
  return nn::Evaluate(model, params, val.x.data(), val.y.data(), val.rows);
}

}  // namespace

Evaluator::Evaluator(const nn::ResolvedModel& model, const data::Dataset& val, EvaluateFn evaluate)
    : model_(model),
      val_(val),
      evaluate_(evaluate ? std::move(evaluate) : EvaluateFn(EvaluateOn)),
      thread_([this] { Loop(); }) {}

Evaluator::~Evaluator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Evaluator::Submit(int64_t index, int64_t step, std::vector<float> params) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Result r;
    r.index = index;
    r.step = step;
    r.params = std::move(params);
    todo_.push_back(std::move(r));
  }
  cv_.notify_all();
}

Status Evaluator::Take(std::vector<Result>* done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  *done = std::exchange(done_, {});
  return Status::Ok();
}

Status Evaluator::Finish(std::vector<Result>* done) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return (todo_.empty() && busy_ == 0) || !error_.ok(); });
  if (!error_.ok()) return error_;
  *done = std::exchange(done_, {});
  return Status::Ok();
}

void Evaluator::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return quit_ || !todo_.empty(); });
    if (quit_) return;  // a run being abandoned: pending evaluations are not wanted
    Result r = std::move(todo_.front());
    todo_.pop_front();
    ++busy_;
    lock.unlock();
    Status error;
    try {
      r.metrics = evaluate_(model_, r.params.data(), val_);
    } catch (...) {  // the standard library's boundary (bad_alloc), converted here
      error = Status::Internal("internal error: the validation of step " + std::to_string(r.step) +
                               ": " + DescribeException(std::current_exception()));
    }
    lock.lock();
    --busy_;
    if (!error.ok()) {
      if (error_.ok()) error_ = error;  // the first one wins; the run ends when the loop sees it
      todo_.clear();
      cv_.notify_all();
      continue;
    }
    done_.push_back(std::move(r));
    cv_.notify_all();
  }
}

bool EarlyStop::Observe(int64_t step, const nn::Metrics& m, std::vector<float> params) {
  // Not finite: never the best (a NaN kept first would stay, as nothing compares lower).
  if (m.finite() && (step_ < 0 || m.loss < metrics_.loss)) {
    step_ = step;
    metrics_ = m;
    since_ = 0;
    if (patience_ > 0) params_ = std::move(params);
    return false;
  }
  ++since_;
  return patience_ > 0 && since_ >= patience_;
}

}  // namespace shmtrain::master
