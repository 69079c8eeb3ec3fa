"""A detector in one file: how much the model agrees with itself on the mirror image.

Put this file in harness/kappas/detectors/ and it is a kappa: ``cood-harness kappas`` lists it (it needs the model),
and ``-k flip_agreement`` (or ``-k flip_agreement:temperature=2``) scores it. Its kind, :class:`ModelKappa`, says
what it needs and which method the harness calls: ``score_model``, in the model's process, a batch at a time. The
score is the probability that the predictions on an image and on its mirror image name the same class,
``softmax(f(x) / T) . softmax(f(flip(x)) / T)``.
"""

import torch
import torch.nn.functional as F

from harness.kappas import ModelKappa, logits_of, register_kappa


@register_kappa("flip_agreement", defaults={"temperature": 1.0})
class FlipAgreement(ModelKappa):
    """the probability that the predictions on an image and on its mirror image agree"""

    def score_model(self, model, images, seed):
        with torch.no_grad():
            probs = [
                F.softmax(logits_of(model(x)).double() / self.params["temperature"], dim=1)
                for x in (images, images.flip(-1))
            ]
        score = (probs[0] * probs[1]).sum(dim=1)
        return score, score
