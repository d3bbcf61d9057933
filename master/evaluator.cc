#include "master/evaluator.h"

#include <utility>

namespace shmtrain::master {

Evaluator::Evaluator(const ModelSpec& spec, const data::Dataset& val)
    : spec_(spec), val_(val), thread_([this] { Loop(); }) {}

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

std::vector<Evaluator::Result> Evaluator::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::exchange(done_, {});
}

std::vector<Evaluator::Result> Evaluator::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return (todo_.empty() && busy_ == 0) || error_ != nullptr; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::exchange(done_, {});
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
    std::exception_ptr error;
    try {
      r.metrics = nn::Evaluate(spec_, r.params.data(), val_.x.data(), val_.y.data(), val_.rows);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    --busy_;
    if (error) {
      error_ = error;  // the first one wins; the run ends when the run loop sees it
      todo_.clear();
      cv_.notify_all();
      continue;
    }
    done_.push_back(std::move(r));
    cv_.notify_all();
  }
}

bool EarlyStop::Observe(int64_t step, const nn::Metrics& m, std::vector<float> params) {
  if (step_ < 0 || m.loss < metrics_.loss) {
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
