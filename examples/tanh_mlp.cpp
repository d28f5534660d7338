// A user's own model: a tanh MLP trained with AdamW and a cosine schedule on any data set the
// loaders read. Usage: tanh_mlp [DATA_DIR_OR_NPZ [TRAIN_LIMIT [EPOCHS]]]
#include <trident/trident.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  using namespace trident;
  DatasetLoadOptions limits;
  limits.train_limit = argc > 2 ? std::stoll(argv[2]) : 0;  // 0: every sample
  DatasetSplits data = load_dataset(argc > 1 ? argv[1] : default_data_directory(), limits);
  auto model = [] {  // input features and output classes inferred from the data
    Network net("tanh_mlp");
    net.add("flatten", Flatten());
    net.add("fc1", Linear(256));
    net.add("tanh1", Tanh());
    net.add("fc2", Linear(128));
    net.add("tanh2", Tanh());
    net.add("fc3", Linear(10));
    return net;  // logits: trained with cross-entropy
  };
  TrainOptions options;
  options.batch = 128;
  options.epochs = argc > 3 ? std::stoll(argv[3]) : 5;
  options.optimizer.kind = "adamw";
  options.optimizer.lr = 1e-3f;
  options.optimizer.weight_decay = 0.01f;
  options.schedule.kind = "cosine";
  Trainer trainer(DeviceRegistry::global().selected_devices(), model, data, options);
  for (int64_t e = 0; e < options.epochs; ++e) {
    const EpochStats s = trainer.train_epoch();
    const EvalStats t = trainer.evaluate();
    std::cout << "epoch " << s.epoch << " loss " << s.train_loss << " test accuracy "
              << t.accuracy << "\n";
  }
  return trainer.evaluate().accuracy > 0.5 ? 0 : 1;  // a working run learns
}
