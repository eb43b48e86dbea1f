# The committed trained family (models/, docs/MODELS.md) in the engine: acceptance floors, every
# format path, the default model. And the training pipeline itself, end to end at smoke size.
set(_models_test ${CMAKE_CURRENT_SOURCE_DIR}/tests/models/test_family.py)
foreach(_what acceptance formats default)
  add_test(NAME models_${_what} COMMAND /usr/bin/python3 ${_models_test} $<TARGET_FILE:nemotron> ${_what})
  set_tests_properties(models_${_what} PROPERTIES LABELS models TIMEOUT 600)
endforeach()
# tools/train/train.py --smoke: every stage (corpus, tokenizer, target+MTP, drafters, export, report) for a
# few steps, so the pipeline that made models/ keeps running. Needs python3-torch (test deps).
add_test(NAME train_pipeline_smoke
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/train/train.py --smoke
                 --nemotron $<TARGET_FILE:nemotron> --work ${CMAKE_CURRENT_BINARY_DIR}/train_smoke
                 --out ${CMAKE_CURRENT_BINARY_DIR}/train_smoke/models)
set_tests_properties(train_pipeline_smoke PROPERTIES LABELS "models;slow" TIMEOUT 900)
